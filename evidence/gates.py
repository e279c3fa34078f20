"""Gates: automated checks that decide whether a submission advances.

A gate is a class registered by name in ``settings.FACTORY_GATES`` (dotted paths);
a project's gate policy says which run, with what parameters. Gates read the raw
artifacts from storage — never the agent's summary, never the parsed summaries an
uploader's file produced — and return a ``Verdict``: passed or not, a one-line
summary, structured details, and a report a person can read. The jobs in
``evidence/jobs.py`` run them; ``evidence.services.gate_run_finish`` stores the
verdict and the report (as ``gate`` evidence).
"""

import abc
import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ValidationError

from decisions.models import Check, SpecVersionState
from evidence import storage
from evidence.models import Evidence, Kind, Provenance, decisive
from evidence.parsers import coverage_root, diff_files, diff_paths, junit_cases
from evidence.selectors import proof_kind, proof_of, tested_criteria
from projects.diffs import unified_diff
from projects.paths import UnsafePath, path_allowed, repo_path


@dataclass(frozen=True)
class Attachment:
    """A file a gate measured itself (the runner's reports), stored as evidence with its verdict.

    ``summary`` is what ``evidence.parsers.summarize`` read from it; ``criteria`` are the
    keys of the criteria it claims to prove.
    """

    content: bytes
    kind: str
    name: str
    media_type: str
    summary: dict
    criteria: tuple[str, ...] = ()


@dataclass
class Verdict:
    passed: bool
    summary: str
    details: dict = field(default_factory=dict)
    report: str = ""
    attachments: list[Attachment] = field(default_factory=list)


class Gate(abc.ABC):
    """Base class. Subclasses set ``name`` and ``description`` and implement ``check``.

    A gate that measures rather than reads (the runner) says so with its class
    attributes, which are what the rest of the site asks (``projects.policy.declares``),
    never the gate's name: ``job`` is the Celery job that runs it (and so the queue it
    runs on), ``goes_first`` makes every other gate of a submission wait for it,
    ``needs_commit`` refuses a submission that names no ``change.commit``,
    ``measures_repository`` needs the project's repository and verify block (and makes
    it the attempt's measuring gate, ``evidence.selectors.measured_run``),
    ``time_limit`` is how long it may run, and ``provenance`` is what its
    ``attachments`` are stored as.
    """

    name = ""
    description = ""
    params: dict = {}  # parameter name -> (type, default)
    job = "evidence.jobs.gate_run_job"
    goes_first = False
    needs_commit = False
    measures_repository = False
    provenance = Provenance.GATE

    @property
    def time_limit(self) -> int:
        return settings.FACTORY_GATE_TIME_LIMIT

    def gave_up(self, error: Exception, params: dict) -> "Verdict | None":
        """The verdict when every try raised ``error``; None makes the run an ``error``."""
        return None

    def clean_params(self, params: dict | None) -> dict:
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ValidationError(f"{self.name}: its parameters must be an object, like {{}}")
        params = dict(params)
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ValidationError(f"{self.name}: unknown parameters {', '.join(unknown)}")
        cleaned = {}
        for name, (kind, default) in self.params.items():
            value = params.get(name, default)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ValidationError(f"{self.name}: {name} must be a {kind.__name__}")
            cleaned[name] = value
        return cleaned

    @abc.abstractmethod
    def check(self, attempt, params: dict, policy: dict) -> Verdict:
        """The verdict on ``attempt``; a gate without one cannot be instantiated."""

    # --- helpers for gates ------------------------------------------------------------

    @staticmethod
    def reports(attempt, kind: str, *, authoritative_only: bool = False) -> "Reports":
        """The evidence of ``kind`` this gate decides on, and what it set aside.

        Every gate that reads reports takes them from here, so the rule of trust
        (``evidence.models.decisive``) holds for all of them: a gate's own reports
        never count, and when authoritative evidence of the kind exists the
        self-reported evidence is set aside, shown in the verdict but never decisive.
        ``authoritative_only`` (the ``authoritative-tests`` policy) sets the
        self-reported evidence aside even when nothing authoritative exists.
        """
        rows = list(
            attempt.evidence.filter(kind=kind)
            .exclude(provenance=Provenance.GATE)
            .prefetch_related("criteria")
            .order_by("id")
        )
        deciding = decisive(rows)
        if authoritative_only:
            deciding = [row for row in deciding if row.authoritative]
        return Reports(deciding, [row for row in rows if row not in deciding])

    @staticmethod
    def open(evidence: Evidence):
        """The evidence file, open for reading: gates stream reports, never read them whole."""
        return storage.open_blob(evidence.file.name)


FAILED_LISTED = 200  # failing tests named in a verdict; the rest are counted
FILES_LISTED = 1000  # paths named in a diff-scope verdict; the rest are counted


def _listed(details: dict) -> dict:
    """A verdict's path lists cut to ``FILES_LISTED``, with their full length beside them."""
    for key in ("files", "outside"):
        if len(details.get(key, ())) > FILES_LISTED:
            details[f"{key}_count"] = len(details[key])
            details[key] = details[key][:FILES_LISTED]
    return details


@dataclass
class Reports:
    """The reports a gate decides on, and the self-reported ones set aside."""

    deciding: list[Evidence]
    set_aside: list[Evidence]

    def details(self) -> dict:
        return {
            "decided_on": [row.pk for row in self.deciding],
            "set_aside": [row.pk for row in self.set_aside],
        }

    def lines(self) -> list[str]:
        """The report's account of which evidence decided, for the person reading it."""
        decided = ", ".join(f"{r.pk} ({r.provenance})" for r in self.deciding) or "none"
        lines = [f"Decided on evidence {decided}."]
        if self.set_aside:
            aside = ", ".join(f"{r.pk} ({r.provenance})" for r in self.set_aside)
            lines.append(
                f"Set aside (self-reported, outweighed by authoritative evidence): {aside}."
            )
        return lines


def _lines(items) -> str:
    return "\n".join(f"- {item}" for item in items) or "- (none)"


class RequiredEvidence(Gate):
    name = "required-evidence"
    description = "Every criterion of the pinned spec version has the proof its check names."

    def check(self, attempt, params, policy):
        version = attempt.spec_version
        if version is None:
            return Verdict(True, "the task has no spec; no criteria to prove", {"criteria": []})
        evidence = list(attempt.evidence.prefetch_related("criteria").order_by("id"))
        rows, missing = [], []
        for criterion in version.criteria.all():
            if criterion.proof.get("check") == Check.REVIEW:
                rows.append({"criterion": criterion.key, "proof": "review", "evidence": []})
                continue
            kind = proof_kind(criterion)
            proof = proof_of(criterion, evidence)
            rows.append(
                {"criterion": criterion.key, "proof": kind, "evidence": [e.pk for e in proof]}
            )
            if not proof:
                missing.append(f"{criterion.key} needs {kind} evidence")
        lines = [f"# required-evidence for {attempt}", "", f"Spec {version}:"]
        for row in rows:
            found = ", ".join(f"evidence {pk}" for pk in row["evidence"])
            if row["proof"] == "review":
                found = "judged in review"
            lines.append(f"- {row['criterion']} ({row['proof']}): {found or 'MISSING'}")
        report = "\n".join(lines)
        if missing:
            return Verdict(
                False, "; ".join(missing), {"missing": missing, "criteria": rows}, report
            )
        return Verdict(
            True, f"all {len(rows)} criteria have their proof", {"criteria": rows}, report
        )


def test_ids(case) -> list[str]:
    """Names a selector like ``tests/test_claim.py::*`` may match, the test's real id first.

    pytest writes ``classname="tests.test_claim.TestX"``; the module is the longest
    prefix whose last part looks like a test module (``test_*`` or ``*_test``), so the
    first id is ``tests/test_claim.py::TestX::name``. The others are other readings.
    """
    classname, name = case.classname or "", case.name or ""
    readings = [f"{case.file}::{name}"] if case.file else []
    readings += [f"{module}::{name}" for module in _module_readings(classname)]
    readings += [f"{classname}::{name}", f"{classname}.{name}"]
    return list(dict.fromkeys(readings))


@lru_cache(maxsize=1024)
def _module_readings(classname: str) -> tuple[str, ...]:
    """``path.py::Class`` readings of a classname, likeliest first; reports repeat a few
    classnames over millions of cases, so each is worked out once."""
    parts = classname.split(".")
    splits = sorted(
        range(len(parts), 0, -1),
        key=lambda n: not (parts[n - 1].startswith("test_") or parts[n - 1].endswith("_test")),
    )
    return tuple("::".join(["/".join(parts[:split]) + ".py", *parts[split:]]) for split in splits)


class TestsPass(Gate):
    name = "tests-pass"
    description = (
        "Every JUnit report parses, has at least one test and no failures or errors; "
        "each criterion's test selector matches tests that passed."
    )

    def check(self, attempt, params, policy):
        authoritative_only = "authoritative-tests" in policy
        chosen = self.reports(attempt, Kind.JUNIT, authoritative_only=authoritative_only)
        reports = chosen.deciding
        which = "authoritative JUnit evidence" if authoritative_only else "JUnit evidence"
        if not reports:
            return Verdict(
                False,
                f"no {which} to check",
                chosen.details(),
                "\n".join([f"No {which} was attached.", *chosen.lines()]),
            )
        # Selectors are matched while the cases stream by: the passing tests of a large
        # report are never all held at once.
        selects = tested_criteria(attempt)
        matched, failed, failures, total, skipped, empty = set(), [], 0, 0, 0, []
        for report in reports:
            cases = 0
            try:
                with self.open(report) as handle:
                    for case in junit_cases(handle):
                        cases += 1
                        if case.outcome == "passed":
                            unmatched_keys = [key for key in selects if key not in matched]
                            if unmatched_keys:
                                ids = test_ids(case)
                                matched.update(
                                    key
                                    for key in unmatched_keys
                                    if any(fnmatch.fnmatchcase(i, selects[key]) for i in ids)
                                )
                        elif case.outcome == "skipped":
                            skipped += 1
                        else:
                            failures += 1
                            if len(failed) < FAILED_LISTED:
                                failed.append(
                                    {
                                        "test": test_ids(case)[0],
                                        "outcome": case.outcome,
                                        "message": case.reason,
                                    }
                                )
            except ValidationError as exc:
                return Verdict(
                    False,
                    f"report {report.pk} ({report.name}) does not parse",
                    {"unparseable": report.pk},
                    "; ".join(exc.messages),
                )
            total += cases
            if cases == 0:
                empty.append(f"{report.name} (evidence {report.pk})")
        unmatched = [
            {"criterion": key, "select": select}
            for key, select in selects.items()
            if key not in matched
        ]
        details = {
            **chosen.details(),
            "tests": total,
            "failed": failed,
            "unmatched_criteria": unmatched,
        }
        report = "\n".join(
            [
                f"# tests-pass for {attempt}",
                "",
                *chosen.lines(),
                "",
                f"{total} tests in {len(reports)} report(s).",
                "",
                "Failed:",
                _lines(f"{f['test']} ({f['outcome']}): {f['message'][:200]}" for f in failed),
                *([f"… and {failures - len(failed)} more"] if failures > len(failed) else []),
                "",
                "Criteria without a passing test:",
                _lines(f"{u['criterion']}: {u['select']}" for u in unmatched),
            ]
        )
        details["skipped"] = skipped
        if failures > len(failed):
            details["failed_count"] = failures
        if empty:
            return Verdict(
                False, f"a JUnit report ran no test: {', '.join(empty)}", details, report
            )
        if total == skipped:
            return Verdict(False, f"all {total} tests were skipped; none passed", details, report)
        if failed:
            names = ", ".join(f["test"] for f in failed[:5])
            return Verdict(False, f"{failures} of {total} tests failed: {names}", details, report)
        if unmatched:
            keys = ", ".join(f"{u['criterion']} ({u['select']})" for u in unmatched)
            return Verdict(False, f"no passing test matches {keys}", details, report)
        passed = total - skipped
        note = f", {skipped} skipped" if skipped else ""
        return Verdict(True, f"{passed} tests passed{note}", details, report)


class CoverageGate(Gate):
    name = "coverage"
    description = "The Cobertura line rate is at or above the policy's threshold."
    params = {"threshold": (float, 0.8)}

    def clean_params(self, params):
        if not isinstance(params, dict | None):
            return super().clean_params(params)  # refuses it with the same message
        params = dict(params or {})
        if isinstance(params.get("threshold"), int) and not isinstance(
            params.get("threshold"), bool
        ):
            params["threshold"] = float(params["threshold"])
        cleaned = super().clean_params(params)
        if not 0 <= cleaned["threshold"] <= 1:
            raise ValidationError("coverage: threshold must lie between 0 and 1")
        return cleaned

    def check(self, attempt, params, policy):
        threshold = self.clean_params(params)["threshold"]
        chosen = self.reports(attempt, Kind.COVERAGE)
        if not chosen.deciding:
            return Verdict(
                False, "no coverage evidence to check", {"threshold": threshold, **chosen.details()}
            )
        report = chosen.deciding[-1]  # the newest of the deciding reports
        try:
            with self.open(report) as handle:
                rate = float(coverage_root(handle)["line-rate"])
            if not 0 <= rate <= 1:
                raise ValueError(rate)
        except (ValidationError, TypeError, ValueError):
            return Verdict(
                False,
                f"coverage report {report.pk} is not a Cobertura report",
                {"report": report.pk},
            )
        details = {
            "report": report.pk,
            "line_rate": rate,
            "threshold": threshold,
            **chosen.details(),
        }
        text = "\n".join(
            [
                f"# coverage for {attempt}",
                "",
                *chosen.lines(),
                "",
                f"Line rate {rate:.1%} against a threshold of {threshold:.1%} (report {report.pk}).",
            ]
        )
        if rate < threshold:
            return Verdict(False, f"line rate {rate:.1%} is below {threshold:.1%}", details, text)
        return Verdict(True, f"line rate {rate:.1%} ≥ {threshold:.1%}", details, text)


class DiffScope(Gate):
    name = "diff-scope"
    description = "Every file the diff touches is inside the task's allowed paths."

    def check(self, attempt, params, policy):
        allowed = attempt.task.allowed_paths
        chosen = self.reports(attempt, Kind.DIFF)
        if not chosen.deciding:
            return Verdict(
                False,
                "no diff evidence to check",
                {"allowed_paths": allowed, **chosen.details()},
            )
        paths, unsafe = {}, []
        for diff in chosen.deciding:
            try:
                with self.open(diff) as handle:
                    for changed in diff_files(handle):
                        for path in diff_paths([changed]):
                            # A path is matched only once it is known to name a file inside
                            # the repository: "templates/../x.py" must not pass as templates/**.
                            try:
                                paths[repo_path(path)] = None
                            except UnsafePath as exc:
                                entry = {"path": path, "reason": str(exc)}
                                if entry not in unsafe and len(unsafe) < FILES_LISTED:
                                    unsafe.append(entry)
            except ValidationError as exc:
                return Verdict(
                    False,
                    f"diff {diff.pk} does not parse",
                    {"unparseable": diff.pk, **chosen.details()},
                    "; ".join(exc.messages),
                )
        paths = list(paths)
        outside = [p for p in paths if allowed and not path_allowed(p, allowed)]
        details = _listed(
            {
                "files": paths,
                "outside": outside,
                "unsafe": unsafe,
                "allowed_paths": allowed,
                **chosen.details(),
            }
        )
        report = "\n".join(
            [
                f"# diff-scope for {attempt}",
                "",
                *chosen.lines(),
                "",
                "Allowed:",
                _lines(allowed or ["(the task sets no path boundary)"]),
                "",
                "Paths that escape the repository:",
                _lines(f"{u['path']!r}: {u['reason']}" for u in unsafe),
                "",
                "Outside the allowed paths:",
                _lines(details["outside"]),
                *(
                    [f"… and {len(outside) - FILES_LISTED} more"]
                    if "outside_count" in details
                    else []
                ),
            ]
        )
        if unsafe:
            names = ", ".join(repr(u["path"]) for u in unsafe[:10])
            return Verdict(
                False,
                f"{len(unsafe)} path(s) escape the repository root: {names}",
                details,
                report,
            )
        if not allowed:
            return Verdict(
                True,
                f"{len(paths)} files changed; the task sets no path boundary",
                details,
                report,
            )
        if outside:
            return Verdict(
                False,
                f"{len(outside)} file(s) outside the allowed paths: {', '.join(outside[:10])}",
                details,
                report,
            )
        return Verdict(True, f"all {len(paths)} files inside the allowed paths", details, report)


class SpecCurrent(Gate):
    name = "spec-current"
    description = "The spec version pinned at claim time is still the accepted one."

    def check(self, attempt, params, policy):
        pinned = attempt.spec_version
        if pinned is None:
            return Verdict(True, "the task has no spec", {})
        pinned.refresh_from_db()
        if pinned.state == SpecVersionState.ACCEPTED:
            return Verdict(True, f"{pinned} is still current", {"pinned": pinned.number})
        current = pinned.spec.current_version()
        details = {"pinned": pinned.number, "current": current.number if current else None}
        if current is None:
            return Verdict(
                False, f"{pinned} is {pinned.state} and the spec has no accepted version", details
            )
        old = {c.key: (c.text, c.proof) for c in pinned.criteria.all()}
        new = {c.key: (c.text, c.proof) for c in current.criteria.all()}
        details.update(
            added=sorted(set(new) - set(old)),
            removed=sorted(set(old) - set(new)),
            changed=sorted(k for k in set(old) & set(new) if old[k] != new[k]),
            source_decision=current.source_decision.key if current.source_decision_id else None,
        )
        body_diff = "".join(
            unified_diff(
                pinned.body.splitlines(keepends=True),
                current.body.splitlines(keepends=True),
                f"{pinned.spec.key} v{pinned.number}",
                f"{pinned.spec.key} v{current.number}",
            )
        )
        details["body_diff"] = body_diff[:20_000]
        summary = f"claimed under v{pinned.number}; the spec is now at v{current.number}"
        if details["source_decision"]:
            summary += f" (amended by {details['source_decision']})"
        report = "\n".join(
            [
                f"# spec-current for {attempt}",
                "",
                summary,
                "",
                f"Criteria added: {details['added']}, removed: {details['removed']}, changed: {details['changed']}",
                "",
                "```diff",
                body_diff,
                "```",
            ]
        )
        return Verdict(False, summary, details, report)


class AuthoritativeTests(Gate):
    name = "authoritative-tests"
    description = "Test evidence must come from a verifier (or a gate), not from the agent."

    def check(self, attempt, params, policy):
        reports = self.reports(attempt, Kind.JUNIT)
        reports = reports.deciding + reports.set_aside
        trusted = [r for r in reports if r.authoritative]
        details = {
            "authoritative": [r.pk for r in trusted],
            "agent": [r.pk for r in reports if not r.authoritative],
        }
        if not trusted:
            return Verdict(
                False,
                "no JUnit evidence from a verifier; the agent's own reports do not count",
                details,
            )
        return Verdict(True, f"{len(trusted)} JUnit report(s) from a verifier", details)
