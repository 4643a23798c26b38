"""The values a run takes whole (analyses.conditions), and the names that say one thing (issue 57)."""

from __future__ import annotations

import threading

from bertscope.analyses.conditions import Conditions, JobOptions
from bertscope.analyses.erasure_results import LiveErasure
from bertscope.model.masks import HeadMask
from tests.helpers.cli import refusals

SENTENCE = "The keys to the cabinet are on the table."


def test_conditions_say_what_changed_the_passes():
    plain = Conditions.none(3, 4)
    assert not plain.changed and plain.masked is None and plain.note() == ""
    masked = Conditions(HeadMask.parse("0:1,2:*", 3, 4), "uniform")
    assert masked.changed and masked.masked == masked.mask
    assert masked.note() == " · mask 0:1,2:* (uniform)"
    erased = Conditions(HeadMask.none(3, 4), erasure=LiveErasure(task="upos", layer=2, rank=16, sentences=40))
    assert erased.changed and erased.masked is None and erased.note() == " · upos erased @2"
    assert Conditions(HeadMask.parse("0:1", 3, 4)) == Conditions(HeadMask.parse("0:1", 3, 4), "zero")  # equal values: the same passes


def test_job_options_tell_a_cancelled_job():
    cancel = threading.Event()
    job = JobOptions(batch_size=4, seed=1, cache_dir=False, cancel=cancel)
    assert not job.cancelled and not JobOptions().cancelled
    cancel.set()
    assert job.cancelled


def test_the_old_spellings_work_for_a_release_and_name_the_new_flag():
    """`probe --probe` (now `--kind`: `--probe` names a task in attribute and compare) and `attribute --steps` (now
    `--ig-steps`: `steps` is the API's stream) still parse, with a note, and refuse what they refused, before torch."""
    cases = [
        ["probe", "--task", "nosuch", "--probe", "mlp"],
        ["probe", "--task", "nosuch", "--kind", "mlp"],
        ["attribute", "", "--steps", "8"],
        ["attribute", "", "--ig-steps", "8"],
    ]
    reports = refusals(cases)
    for case, new in zip(cases, ("--kind", None, "--ig-steps", None)):
        report = reports[tuple(case)]
        assert report["code"] == 2 and report["imported"] == [] and report["stdout"] == "", report
        lines = report["stderr"].splitlines()
        assert lines[-1].startswith("bertscope: error: ")
        if new is None:
            assert len(lines) == 1, lines
        else:
            assert len(lines) == 2 and f"is now {new}" in lines[0], lines
