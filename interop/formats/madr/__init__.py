"""MADR architecture decision records: a folder of `NNNN-title.md` files.

Reading (`parse`):
- an ADR is a `.md` file named with a number (`0005-use-postgres.md`, `adr-0005-…`, `adr005-…`,
  `ADR-0013-…`) at the root of the upload or in a folder named `decisions`, `adr`, `adrs`,
  `architecture-decisions` (and the like). Other `.md` files there (README, index, templates,
  dated notes) and numbered files that are not `.md` get a Notice; files elsewhere are ignored.
  The number is kept in `number`; the external id is the file's folder and the number as
  the file name writes it (`docs/adr/0005`; `0005` for a file at the upload's root), so two
  logs in one upload or one project (`docs/adr/`, `services/x/adr/`) never take each other's
  records. A second file with a number already seen in its folder is a Skip naming both files.
- metadata comes from YAML front matter (MADR 4: `status`, `date`, `decision-makers`,
  `consulted`, `informed`), from `* Status:`/`- Deciders:`/`Date:` lines under the title
  (MADR 2 and 3), or from a `## Status` section (Nygard). Other front-matter keys go in
  `extra["front_matter"]`, other metadata lines (`Technical Story:`, …) in `extra["metadata"]`,
  and a `factory-memory:` front-matter key (what `write` puts there) back into `extra`.
  Front matter is read by `safe_yaml`: one with an alias (`*a`) refuses the whole upload.
- the title is the H1, or the front matter's `title`, less a number prefix (`1.`, `ADR-0001:`,
  `ADR013:`) and a `[Superseded by …]` prefix, which also marks the record superseded.
- `## Context and Problem Statement` is the context; `## Decision Outcome` the decision, less
  its `### Consequences` / `### Positive Consequences` / `### Negative Consequences`, which
  are the consequences. `## Considered Options` less the chosen option (`Chosen option: "…"`)
  are the alternatives, each with its `Bad, because …` arguments from `## Pros and Cons of
  the Options` as the reason. Other `##` sections go in `extra["sections"]`. Headings inside
  fenced code are text.
- statuses: proposed, draft, on hold, in progress → proposed; accepted, approved → accepted;
  rejected, declined → rejected; `superseded by ADR-0005` → superseded, and 0005 (of the same
  folder) gets this
  record in its `supersedes`; deprecated → superseded with no successor. `supersedes ADR-0045`
  in a status is recorded on the record itself. No status (or template text only) → proposed,
  an unknown one → the nearest state; both with a Notice. A successor or predecessor number
  not in the folder gets a Notice and is kept in `extra["superseded_by"]`/`extra["supersedes"]`.
- the date is read from `YYYY-MM-DD` (also in a link or quoted); anything else is kept in
  `extra["date"]`, with a Notice.

Writing (`write`) gives a MADR 4 folder that `parse` reads back to the same decisions.

The package's modules: `reading` (`parse`), `writing` (`write`), `options` (the considered
options, the chosen one and their pros and cons, read and written back) and `text` (the
keys and small text readers the others share).
"""

from interop.formats.madr.reading import parse
from interop.formats.madr.writing import write

__all__ = ["parse", "write"]
