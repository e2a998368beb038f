"""The job spec's pure parts (jobs/spec.py) and the submission rules that need no database
(jobs/submission/validation.py), as tables. The rules that look things up (a free name, the
datacenter, the registry, the package, the quota) and the whole submission through every surface
are tested against the database in jobs/tests/test_submission.py and jobs/tests/test_spec.py."""

import re

import pytest

from jobs import spec
from jobs.submission import validation
from jobs.submission.validation import Submission

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name, valid", [
    ("fit-a-line", True), ("my.job", True), ("MyJob", True), ("v1.2.3", True), ("a", True), ("a" * 40, True),
    ("a" * 41, False), ("fit_a_line", False), ("-job", False), ("1job", False), ("job-", False), ("my.job.", False),
    ("", False), ("../x", False), ("job\n", False),
], ids=lambda v: repr(v) if isinstance(v, str) else None)
def test_job_names_as_seed_004_allows_them(name, valid):
    assert spec.valid_name(name) is valid


@pytest.mark.parametrize("name, k8s", [
    ("fit-a-line", "fit-a-line"),  # already a DNS label: itself
    ("My.Job", "my-job-fadc3422"),
    ("fit.a.line", "fit-a-line-40074175"),  # never the same as fit-a-line's
    ("A" + "b.C" * 13, "ab-cb-cb-cb-cb-cb-cb-cb-cb-cb-c-6627900c"),  # cut to NAME_MAX, no '-' before the hash
], ids=["dns-label", "capitals-and-dots", "dots", "longest"])
def test_kubernetes_names(name, k8s):
    assert spec.k8s_name(name) == k8s
    assert len(k8s) <= spec.NAME_MAX and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", k8s)


@pytest.mark.parametrize("text, codes", [
    ("2", {2}), ("2, 127", {2, 127}), ("127,2,2", {2, 127}), ("", set()), (" 1 , 255 ", {1, 255}),
    (",".join(str(c) for c in range(1, 21)), set(range(1, 21))),
], ids=["one", "two", "repeated", "none", "bounds", "twenty"])
def test_permanent_exit_codes_parse(text, codes):
    assert spec.exit_codes(text) == codes


@pytest.mark.parametrize("text", ["0", "256", "-1", "two", "2;3", ",".join(str(c) for c in range(1, 22))],
                         ids=["zero", "over-255", "negative", "words", "semicolon", "twenty-one"])
def test_permanent_exit_codes_refused(text):
    with pytest.raises(ValueError):
        spec.exit_codes(text)


@pytest.mark.parametrize("mode, pservers", [("ps", 1), ("collective", 0)])
def test_defaults_depend_on_the_mode(mode, pservers):
    defaults = spec.defaults(mode)
    assert defaults["pservers"] == pservers
    assert "name" not in defaults and "package" not in defaults and "entry" not in defaults  # required
    assert defaults["env"] == {} and defaults["env"] is not spec.defaults(mode)["env"]  # a fresh dict each time


GOOD = dict(spec.defaults("ps"), name="fit", package="/pfs/local/home/alice/fit", entry="python train.py")
TOO_MANY_ENV = {f"V{i}": "" for i in range(spec.MAX_ENV_VARS + 1)}
TOO_LARGE_ENV = {"BIG": "x" * spec.MAX_ENV_BYTES}

# (id, the rule, fields changed from GOOD, {field: a part of its error}; {} when it passes)
RULES = [
    ("ps-needs-a-pserver", validation.pservers_fit_the_mode, {"pservers": 0}, {"pservers": "at least 1 pserver"}),
    ("collective-has-none", validation.pservers_fit_the_mode, {"mode": "collective", "pservers": 1},
     {"pservers": "collective mode has no pservers"}),
    ("collective-with-0", validation.pservers_fit_the_mode, {"mode": "collective", "pservers": 0}, {}),
    ("quantities", validation.quantities_parse, {"cpu": "500m", "memory": "512Mi", "pscpu": "0.5", "psmemory": "1Gi"},
     {}),
    ("every-bad-quantity", validation.quantities_parse, {"cpu": "fast", "memory": "1Xi", "pscpu": "0", "psmemory": "1"},
     {"cpu": "not a CPU amount", "memory": "not a memory amount", "pscpu": "more than 0", "psmemory": "at least 1Mi"}),
    ("entry", validation.entry_parses, {"entry": "python train.py --lr 0.1 'a b'"}, {}),
    ("entry-of-spaces", validation.entry_parses, {"entry": "   "}, {"entry": "the entry point is required"}),
    ("entry-unclosed-quote", validation.entry_parses, {"entry": "python 'unclosed"}, {"entry": "cannot parse"}),
    ("image", validation.image_is_a_reference, {"image": "registry.example.com:5000/team/paddle@sha256:abc"}, {}),
    ("no-image", validation.image_is_a_reference, {"image": ""}, {}),
    ("image-with-a-space", validation.image_is_a_reference, {"image": "bad image"}, {"image": "not a valid image"}),
    ("image-too-long", validation.image_is_a_reference, {"image": "a" * 301}, {"image": "not a valid image"}),
    ("env-at-the-limits", validation.env_within_limits, {"env": {f"V{i}": "" for i in range(spec.MAX_ENV_VARS)}}, {}),
    ("env-too-many", validation.env_within_limits, {"env": TOO_MANY_ENV}, {"env": f"at most {spec.MAX_ENV_VARS}"}),
    ("env-too-large", validation.env_within_limits, {"env": TOO_LARGE_ENV}, {"env": "KiB of names and values"}),
    ("env-names", validation.env_names_are_allowed, {"env": {"LR": "0.1", "_x9": ""}}, {}),
    ("env-bad-and-reserved-at-once", validation.env_names_are_allowed,
     {"env": {"1BAD": "", "A-B": "", "PADDLE_TRAINER_ID": "9"}},
     {"env": "'1BAD' is not a valid environment variable name; 'A-B' is not a valid environment variable name; "
             "PADDLE_TRAINER_ID is set by PaddleCloud"}),
    ("exit-codes", validation.exit_codes_parse, {"permanent_exit_codes": "127, 2"}, {}),
    ("exit-codes-refused", validation.exit_codes_parse, {"permanent_exit_codes": "0"},
     {"permanent_exit_codes": "whole numbers from 1 to 255"}),
]


@pytest.mark.parametrize("rule, changes, errors", [c[1:] for c in RULES], ids=[c[0] for c in RULES])
def test_submission_rules_that_need_no_database(rule, changes, errors):
    s = Submission(user=None, data=dict(GOOD, **changes))
    rule(s)
    assert set(s.errors) == set(errors)
    for field, part in errors.items():
        assert part in s.errors[field], s.errors[field]


def test_a_rule_skips_a_field_that_already_has_an_error():
    s = Submission(user=None, data=dict(GOOD, entry="python 'unclosed"), errors={"entry": "required"})
    validation.entry_parses(s)
    assert s.errors == {"entry": "required"}


def test_permanent_exit_codes_are_kept_sorted_and_without_repeats():
    s = Submission(user=None, data=dict(GOOD, permanent_exit_codes=" 127,2, 2"))
    validation.exit_codes_parse(s)
    assert s.data["permanent_exit_codes"] == "2, 127"
