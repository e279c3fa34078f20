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
import difflib
import fnmatch
from dataclasses import dataclass, field
from functools import cache, lru_cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from decisions.models import Check, SpecVersionState
from evidence import storage
from evidence.models import AUTHORITATIVE_PROVENANCES, Evidence, Kind
from evidence.parsers import coverage_root, diff_files, diff_paths, junit_cases
from tasks.services import path_allowed


@dataclass
class Verdict:
    passed: bool
    summary: str
    details: dict = field(default_factory=dict)
    report: str = ""


class Gate(abc.ABC):
    """Base class. Subclasses set ``name`` and ``description`` and implement ``check``."""

    name = ""
    description = ""
    params: dict = {}  # parameter name -> (type, default)

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
    def evidence(attempt, kind: str, authoritative_only: bool = False) -> list[Evidence]:
        rows = attempt.evidence.filter(kind=kind).prefetch_related("criteria").order_by("id")
        if authoritative_only:
            rows = rows.filter(provenance__in=AUTHORITATIVE_PROVENANCES)
        return list(rows)

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
            check = criterion.proof.get("check")
            if check == Check.REVIEW:
                rows.append({"criterion": criterion.key, "proof": "review", "evidence": []})
                continue
            kind = Kind.JUNIT if check == Check.TESTS else criterion.proof.get("kind")
            of_kind = [e for e in evidence if e.kind == kind]
            naming = [e for e in of_kind if criterion in e.criteria.all()]
            proof = naming or of_kind
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
        reports = self.evidence(attempt, Kind.JUNIT, authoritative_only=authoritative_only)
        which = "authoritative JUnit evidence" if authoritative_only else "JUnit evidence"
        if not reports:
            return Verdict(
                False, f"no {which} to check", {"reports": []}, f"No {which} was attached."
            )
        # Selectors are matched while the cases stream by: the passing tests of a large
        # report are never all held at once.
        selects = {}
        if attempt.spec_version_id:
            for criterion in attempt.spec_version.criteria.all():
                if criterion.proof.get("check") == Check.TESTS:
                    selects[criterion.key] = criterion.proof.get("select")
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
            "reports": [r.pk for r in reports],
            "tests": total,
            "failed": failed,
            "unmatched_criteria": unmatched,
        }
        report = "\n".join(
            [
                f"# tests-pass for {attempt}",
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
        reports = self.evidence(attempt, Kind.COVERAGE)
        if not reports:
            return Verdict(False, "no coverage evidence to check", {"threshold": threshold})
        report = reports[-1]  # the newest report decides
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
        details = {"report": report.pk, "line_rate": rate, "threshold": threshold}
        text = f"# coverage for {attempt}\n\nLine rate {rate:.1%} against a threshold of {threshold:.1%} (report {report.pk})."
        if rate < threshold:
            return Verdict(False, f"line rate {rate:.1%} is below {threshold:.1%}", details, text)
        return Verdict(True, f"line rate {rate:.1%} ≥ {threshold:.1%}", details, text)


class DiffScope(Gate):
    name = "diff-scope"
    description = "Every file the diff touches is inside the task's allowed paths."

    def check(self, attempt, params, policy):
        allowed = attempt.task.allowed_paths
        diffs = self.evidence(attempt, Kind.DIFF)
        if not diffs:
            return Verdict(False, "no diff evidence to check", {"allowed_paths": allowed})
        paths = {}
        for diff in diffs:
            try:
                with self.open(diff) as handle:
                    for changed in diff_files(handle):
                        paths.update(dict.fromkeys(diff_paths([changed])))
            except ValidationError as exc:
                return Verdict(
                    False,
                    f"diff {diff.pk} does not parse",
                    {"unparseable": diff.pk},
                    "; ".join(exc.messages),
                )
        paths = list(paths)
        if not allowed:
            return Verdict(
                True,
                f"{len(paths)} files changed; the task sets no path boundary",
                _listed({"files": paths, "allowed_paths": []}),
            )
        outside = [p for p in paths if not path_allowed(p, allowed)]
        details = _listed({"files": paths, "outside": outside, "allowed_paths": allowed})
        report = "\n".join(
            [
                f"# diff-scope for {attempt}",
                "",
                "Allowed:",
                _lines(allowed),
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
            difflib.unified_diff(
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
        reports = self.evidence(attempt, Kind.JUNIT)
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


@cache
def registry() -> dict[str, Gate]:
    """The gates known to this site: ``FACTORY_GATES`` plus ``FACTORY_EXTRA_GATES``."""
    gates = {}
    for name, path in {**settings.FACTORY_GATES, **settings.FACTORY_EXTRA_GATES}.items():
        gate = import_string(path)()
        gate.name = name
        gates[name] = gate
    return gates


def clean_policy(policy) -> dict:
    """Validate a gate policy ``{gate name: {params}}`` against the registry."""
    if not isinstance(policy, dict):
        raise ValidationError({"gate_policy": 'must be an object: {"gate name": {parameters}}'})
    gates, cleaned, errors = registry(), {}, []
    for name, params in policy.items():
        if name not in gates:
            errors.append(f"unknown gate {name!r} (known: {', '.join(sorted(gates))})")
            continue
        try:
            cleaned[name] = gates[name].clean_params(params)
        except ValidationError as exc:
            errors.extend(exc.messages)
    if errors:
        raise ValidationError({"gate_policy": errors})
    return cleaned
