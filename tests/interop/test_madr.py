"""MADR import and export (interop.formats.madr): real folders, then small odd cases."""

from collections import Counter
from datetime import date
from pathlib import Path
from textwrap import dedent

from interop.documents import DecisionDoc, Skip, Source
from interop.formats import madr

FIXTURES = Path(__file__).parents[1] / "fixtures" / "interop" / "madr"
COMPARED = [
    "external_id",
    "title",
    "state",
    "number",
    "date",
    "deciders",
    "consulted",
    "informed",
    "context",
    "decision",
    "consequences",
    "alternatives",
    "supersedes",
]


def folder(name: str) -> dict[str, bytes]:
    root = FIXTURES / name
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and path.name != "LICENSE"
    }


def adrs(**files: str) -> dict[str, bytes]:
    """Inline ADRs: keyword `d0005` is `docs/decisions/0005-x.md`, other keywords the path."""
    return {
        (f"docs/decisions/{name[1:]}-x.md" if name[0] == "d" and name[1:].isdigit() else name): (
            dedent(text).lstrip().encode()
        )
        for name, text in files.items()
    }


def one(text: str):
    parsed = madr.parse(adrs(d0001=text))
    return parsed.decisions[0], parsed


def fields(decision: DecisionDoc) -> dict:
    return {name: getattr(decision, name) for name in COMPARED}


def by_id(parsed) -> dict[str, DecisionDoc]:
    """The decisions of one folder by their number as written (``0005`` of ``adr/0005``)."""
    return {decision.external_id.rsplit("/", 1)[-1]: decision for decision in parsed.decisions}


def test_madr_own_folder_reads_every_numbered_file_and_nothing_else():
    parsed = madr.parse(folder("adr-madr"))
    assert len(parsed.decisions) == 19
    assert [d.external_id for d in parsed.decisions][:3] == [
        "docs/decisions/0000",
        "docs/decisions/0001",
        "docs/decisions/0002",
    ]
    assert parsed.skips == []
    ignored = {n.source.path for n in parsed.notices if n.message.startswith("not an ADR")}
    assert ignored == {"docs/decisions/adr-template.md", "docs/decisions/index.md"}
    states = Counter(d.state for d in parsed.decisions)
    assert states == {"proposed": 19}


def test_madr_own_folder_on_hold_status_and_yaml_extra():
    decisions = by_id(madr.parse(folder("adr-madr")))
    tooling = decisions["0003"]
    assert (tooling.state, tooling.source_status) == ("proposed", "on hold")
    assert tooling.title == "Write Own MADR Tooling"
    assert tooling.extra["front_matter"] == {"parent": "Decisions", "nav_order": 3}
    assert len(tooling.alternatives) == 4
    assert tooling.alternatives[-1] == {"option": "No tool support", "reason": ""}
    assert tooling.decision.startswith('Chosen option: "Write own MADR tooling", because')


def test_madr_own_folder_reasons_are_the_bad_arguments():
    yaml_adr = by_id(madr.parse(folder("adr-madr")))["0013"]
    assert yaml_adr.alternatives == [
        {
            "option": "Use plain Markdown everywhere",
            "reason": "special markdown parsing tooling is needed; "
            "metadata is handled the same way as the content",
        }
    ]
    # The example inside a ```markdown fence holds `status:` and `###` lines: they are text.
    assert yaml_adr.source_status is None
    pros_and_cons = yaml_adr.extra["sections"]["Pros and Cons of the Options"]
    assert "```markdown\n---\nstatus: accepted\n" in pros_and_cons


def test_elastisys_folder_counts_and_supersede_chain():
    parsed = madr.parse(folder("elastisys-compliantkubernetes"))
    decisions = by_id(parsed)
    assert len(parsed.decisions) == 57
    assert parsed.skips == []
    assert Counter(d.state for d in parsed.decisions) == {
        "accepted": 50,
        "superseded": 5,
        "proposed": 2,
    }
    assert decisions["0012"].state == "superseded"
    assert decisions["0017"].supersedes == ["docs/adr/0012"]
    assert decisions["0019"].supersedes == ["docs/adr/0003"]
    assert decisions["0056"].supersedes == ["docs/adr/0023"]


def test_elastisys_superseded_title_prefix_is_dropped():
    decisions = by_id(madr.parse(folder("elastisys-compliantkubernetes")))
    old = decisions["0003"]
    assert old.title == "Push Metrics via InfluxDB"
    assert old.source_status == "superseded by [ADR-0019](0019-push-metrics-via-thanos.md)"
    assert old.deciders == ["Johan", "Cristian", "Viktor", "Emil", "Olle", "Fredrik"]
    assert old.date == date(2020, 11, 19)
    assert old.consequences.startswith("**Positive Consequences**\n\n- All of `*.$opsDomain`")
    assert "**Negative Consequences**" in old.consequences
    assert "Positive Consequences" not in old.decision


def test_elastisys_odd_records():
    parsed = madr.parse(folder("elastisys-compliantkubernetes"))
    decisions = by_id(parsed)
    assert decisions["0010"].state == "proposed"
    assert decisions["0010"].source_status.startswith("proposed. **This ADR did not reach")
    note = next(n for n in parsed.notices if n.source == Source(decisions["0010"].source.path, 4))
    assert note.message.endswith("imported as proposed")
    # Commas inside parentheses stay in one name.
    assert decisions["0015"].deciders == [
        "Rob",
        "Johan",
        "Cristian (a.k.a., Product Management working group)",
    ]
    assert decisions["0015"].extra["front_matter"]["tags"] == [
        "ISO 27001 A.17.1.1 Planning Information Security Continuity"
    ]
    assert decisions["0022"].extra["metadata"] == {"Updated": "2023-01-12"}


def test_elastisys_chosen_options_by_number_and_in_backticks():
    decisions = by_id(madr.parse(folder("elastisys-compliantkubernetes")))
    ttl = decisions["0037"]  # "Chosen option: 3 - …"
    assert [a["option"] for a in ttl.alternatives] == [
        "Do nothing",
        "Enforce TTL via Gatekeeper, aka reject if not set in Job spec.",
        "Enforce TTL via Gatekeeper mutation, aka update Job spec if not set. and lower the "
        "value if set too high.",
    ]
    eviction = decisions["0028"]  # "Chosen options: `A` & `B` ."
    assert [a["option"] for a in eviction.alternatives] == [
        "Adjust OOM score so that kernel does not OOM critical Pods",
        "Do not make any changes and reinforce the responsibility to the customer for not "
        "overloading the nodes.",
    ]


def test_elastisys_unnamed_choice_keeps_options_aside():
    parsed = madr.parse(folder("elastisys-compliantkubernetes"))
    influx = by_id(parsed)["0003"]
    assert influx.alternatives == []
    assert len(influx.extra["considered_options"]) == 3
    assert "Pros and Cons of the Options" in influx.extra["sections"]
    assert any(
        n.source.path.endswith("0003-push-metrics-via-influxdb.md")
        and n.message.startswith("no `Chosen option:`")
        for n in parsed.notices
    )


def test_phdi_nygard_status_sections_and_odd_files():
    parsed = madr.parse(folder("CDCgov-phdi"))
    decisions = by_id(parsed)
    assert list(decisions) == [f"{n:04d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12)]
    assert (decisions["0001"].state, decisions["0001"].source_status) == ("accepted", "Approved")
    assert (decisions["0003"].state, decisions["0003"].source_status) == ("proposed", "Draft")
    assert decisions["0007"].state == "rejected"
    assert decisions["0001"].date == date(2022, 2, 7)
    assert decisions["0001"].title == "Record architecture decisions"
    not_md = [n for n in parsed.notices if n.source.path == "docs/decisions/0009-fhirpath-module"]
    assert [n.message for n in not_md] == ["numbered, but not a .md file: not read"]


def test_real_folders_round_trip():
    for name in ("adr-madr", "elastisys-compliantkubernetes", "CDCgov-phdi"):
        first = madr.parse(folder(name))
        where = first.decisions[0].external_id.rsplit("/", 1)[0]
        written = madr.write(first.decisions)
        again = madr.parse({f"{where}/{path}": data for path, data in written.items()})
        assert again.skips == []
        assert [fields(d) for d in again.decisions] == [fields(d) for d in first.decisions]
        assert [d.extra for d in again.decisions] == [d.extra for d in first.decisions]


def test_madr4_front_matter():
    decision, parsed = one(
        """
        ---
        status: "accepted"
        date: 2024-03-05
        decision-makers: [Ana, Bo]
        consulted:
          - Cy
        informed: Dee, Eve
        ---
        # 0001. Use PostgreSQL
        """
    )
    assert decision.title == "Use PostgreSQL"
    assert (decision.state, decision.source_status) == ("accepted", "accepted")
    assert decision.date == date(2024, 3, 5)
    assert (decision.deciders, decision.consulted, decision.informed) == (
        ["Ana", "Bo"],
        ["Cy"],
        ["Dee", "Eve"],
    )
    assert parsed.notices == []


def test_madr2_bullets_and_technical_story():
    decision, _ = one(
        """
        # ADR-0001: Use PostgreSQL

        * Status: Approved <!-- optional -->
        * Deciders: Ana, Bo
        * Date: [2020-06-15](https://example.org/pr/1)

        Technical Story: [persist accounts](https://example.org/issues/34)

        ## Context and Problem Statement

        We need a database.
        """
    )
    assert (decision.title, decision.state, decision.source_status) == (
        "Use PostgreSQL",
        "accepted",
        "Approved",
    )
    assert decision.date == date(2020, 6, 15)
    assert decision.extra["metadata"] == {
        "Technical Story": "[persist accounts](https://example.org/issues/34)"
    }
    assert decision.context == "We need a database."


def test_status_words_map_to_our_states():
    cases = {
        "draft": "proposed",
        "In Progress": "proposed",
        "declined": "rejected",
        "Approved": "accepted",
        "accepted; supersedes ADR-0045": "accepted",
        "deprecated": "superseded",
        "looks good to me": "proposed",
        "Done, shipped": "accepted",
    }
    for status, state in cases.items():
        decision, _ = one(f"# T\n\n- Status: {status}\n")
        assert (decision.state, decision.source_status) == (state, status), status


def test_unknown_and_missing_status_get_a_notice():
    _, parsed = one("# T\n\n- Status: looks good to me\n")
    assert [n.message for n in parsed.notices] == [
        "unknown status 'looks good to me': imported as proposed"
    ]
    assert parsed.notices[0].source == Source("docs/decisions/0001-x.md", 3)
    for text in (
        "# T\n",
        "# T\n\n<!-- status: proposed | accepted -->\n",
        "# T\n\n* Status: [a | b]\n",
    ):
        missing, parsed = one(text)
        assert (missing.state, missing.source_status) in (
            ("proposed", None),
            ("proposed", "[a | b]"),
        )
        assert [n.message for n in parsed.notices] == ["no status: imported as proposed"]


def test_superseded_by_forms_link_the_successor():
    parsed = madr.parse(
        adrs(
            d0001="# A\n\n* Status: superseded by [ADR-0005](0005-x.md)\n",
            d0002='---\nstatus: "superseded by ADR-0005"\n---\n# B\n',
            d0003="# C\n\n## Status\n\nSuperseded by 0005\n",
            d0004="# [Superseded by [ADR-0005](0005-x.md)] D\n\n* Status: accepted\n",
            d0005="# E\n\n* Status: accepted\n",
        )
    )
    decisions = by_id(parsed)
    assert [decisions[k].state for k in ("0001", "0002", "0003", "0004")] == ["superseded"] * 4
    assert decisions["0004"].title == "D"
    assert decisions["0005"].supersedes == [f"docs/decisions/000{n}" for n in (1, 2, 3, 4)]
    assert parsed.notices == []


def test_supersedes_in_status_and_missing_targets():
    parsed = madr.parse(
        adrs(
            d0045="# Old\n\n* Status: accepted\n",
            d0046="# New\n\n* Status: accepted; supersedes ADR-0045\n",
            d0047="# Gone\n\n* Status: superseded by [ADR-0099](0099-gone.md)\n",
        )
    )
    decisions = by_id(parsed)
    assert decisions["0046"].supersedes == ["docs/decisions/0045"]
    assert decisions["0045"].state == "accepted"
    assert decisions["0047"].state == "superseded"
    assert decisions["0047"].extra["superseded_by"] == ["0099"]
    assert [(str(n.source), n.message) for n in parsed.notices] == [
        ("docs/decisions/0047-x.md:3", "superseded by ADR 0099, which is not in the folder")
    ]


def test_deprecated_is_superseded_without_successor():
    decision, parsed = one("# T\n\n* Status: deprecated\n")
    assert (decision.state, decision.supersedes) == ("superseded", [])
    assert [n.message for n in parsed.notices] == [
        "deprecated: imported as superseded, with no successor"
    ]


def test_duplicate_number_is_a_skip_naming_both_files():
    parsed = madr.parse(
        {
            "docs/adr/0004-first.md": b"# First\n\n* Status: accepted\n",
            "docs/adr/0004-second.md": b"# Second\n\n* Status: accepted\n",
        }
    )
    assert [d.title for d in parsed.decisions] == ["First"]
    assert parsed.skips == [
        Skip(
            Source("docs/adr/0004-second.md"),
            "number 0004 is taken by docs/adr/0004-first.md already",
        )
    ]


def test_non_utf8_file_is_a_skip_at_line_one():
    parsed = madr.parse({"doc/adr/0002-latin.md": "# Café\n".encode("latin-1")})
    assert parsed.decisions == []
    assert parsed.skips[0].source == Source("doc/adr/0002-latin.md", 1)
    assert parsed.skips[0].reason.startswith("not UTF-8")


def test_file_names_and_folders():
    files = {
        "adr/adr-0007-prefixed.md": b"# P\n",
        "architecture-decisions/adr013-backstage-style.md": b"# B\n",
        "docs/decisions/README.md": b"# Decisions\n",
        "docs/decisions/0000-template.md": b"# {title}\n",
        "docs/decisions/2024-01-02-notes.md": b"# Notes\n",
        "docs/guide/0001-not-a-decision.md": b"# Guide\n",
        "docs/decisions/0003-picture.png": b"\x89PNG",
    }
    parsed = madr.parse(files)
    assert [(d.external_id, d.number) for d in parsed.decisions] == [
        ("adr/0007", 7),
        ("architecture-decisions/013", 13),
    ]
    assert sorted(n.source.path for n in parsed.notices if "no status" not in n.message) == [
        "docs/decisions/0000-template.md",
        "docs/decisions/0003-picture.png",
        "docs/decisions/2024-01-02-notes.md",
        "docs/decisions/README.md",
    ]


def test_headings_inside_fenced_code_are_text():
    decision, _ = one(
        """
        # Real

        * Status: accepted

        ## Context and Problem Statement

        ```markdown
        ## Decision Outcome
        * Status: rejected
        ```
        """
    )
    assert decision.state == "accepted"
    assert decision.decision == ""
    assert decision.context.startswith("```markdown\n## Decision Outcome")


def test_dates_that_do_not_parse_are_kept():
    decision, parsed = one("# T\n\n* Status: accepted\n* Date: May 2020\n")
    assert decision.date is None
    assert decision.extra["date"] == "May 2020"
    assert [n.message for n in parsed.notices] == [
        "date 'May 2020' is not YYYY-MM-DD: not imported"
    ]
    quoted, _ = one('---\nstatus: accepted\ndate: "2020-05-13"\n---\n# T\n')
    assert quoted.date == date(2020, 5, 13)


def test_write_gives_madr4_files_that_read_back_the_same():
    decisions = [
        DecisionDoc(
            external_id="0005",
            title="Use PostgreSQL",
            source=Source("x"),
            number=5,
            state="accepted",
            date=date(2024, 1, 2),
            deciders=["Ana", "@bo"],
            consulted=["Cy"],
            informed=["Dee"],
            context="We need a database.",
            decision='Chosen option: "PostgreSQL", because it is boring.',
            consequences="* Good, because we know it",
            alternatives=[{"option": "MySQL", "reason": "no transactional DDL"}],
            supersedes=["0002"],
            extra={"ticket": "FM-12"},
        ),
        DecisionDoc(
            external_id="0002", title="Use SQLite", source=Source("y"), number=2, state="superseded"
        ),
    ]
    files = madr.write(decisions)
    assert sorted(files) == ["0002-use-sqlite.md", "0005-use-postgresql.md"]
    assert (
        b"status: superseded by [ADR-0005](0005-use-postgresql.md)\n" in files["0002-use-sqlite.md"]
    )
    again = by_id(madr.parse(files))
    assert fields(again["0005"]) == fields(decisions[0])
    assert fields(again["0002"]) == fields(decisions[1])
    assert again["0005"].extra == {"ticket": "FM-12"}


def test_write_front_matter_and_sections():
    decision = DecisionDoc(
        external_id="0001",
        title="Pick",
        source=Source("x"),
        number=1,
        state="proposed",
        context="Why.",
        decision="We pick one.",
        consequences="Less choice.",
        alternatives=[{"option": "Other", "reason": "slow"}],
    )
    text = madr.write([decision])["0001-pick.md"].decode()
    assert text.startswith(
        "---\nstatus: proposed\nfactory-memory:\n  alternatives-listed: true\n---\n# Pick\n"
    )
    assert (
        "## Considered Options\n\n* Other\n\n## Decision Outcome\n\nWe pick one.\n\n### Consequences\n\nLess choice."
        in text
    )
    assert text.endswith("## Pros and Cons of the Options\n\n### Other\n\n* Bad, because slow\n")
    assert fields(madr.parse({"0001-pick.md": text.encode()}).decisions[0]) == fields(decision)


def test_write_numbers_decisions_without_one_and_keeps_their_id():
    decision = DecisionDoc(external_id="add-auth", title="Add auth", source=Source("x"))
    files = madr.write([decision])
    assert list(files) == ["0001-add-auth.md"]
    again = madr.parse(files).decisions[0]
    assert (again.external_id, again.number, again.extra) == (
        "0001",
        1,
        {"external-id": "add-auth"},
    )
