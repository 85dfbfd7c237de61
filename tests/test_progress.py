"""Progress lines in a log file: moved by an engine's batches inside a unit of work, the last
line once, nothing moved by a part that fails."""

from __future__ import annotations

import pytest

from scd.progress import Progress, tick


@pytest.fixture
def lines(monkeypatch, capsys):
    monkeypatch.setenv("SCD_PROGRESS_SECONDS", "0")  # a line at every move

    def read() -> list[str]:
        return capsys.readouterr().err.splitlines()

    return read


def test_ticks_move_the_line_through_a_part_and_the_last_line_comes_once(lines) -> None:
    bar = Progress("work", 100, unit="prompt")
    with bar.part(40):
        for done in range(1, 5):
            tick(done, 4)  # an engine's 4 batches
    with bar.part(60):
        tick(1, 3)
        tick(1, 3)  # the same share again moves nothing
    assert bar.done == 100
    bar.close()
    out = lines()
    counts = [int(x.split(": ")[1].split("/")[0]) for x in out]
    assert counts == [10, 20, 30, 40, 60, 100] and out[-1].endswith(", done"), out
    assert sum("(100%)" in x for x in out) == 1


def test_a_tick_outside_any_part_and_a_failed_part_move_nothing(lines) -> None:
    bar = Progress("work", 10)
    tick(5, 10)
    with pytest.raises(RuntimeError), bar.part(10):
        tick(3, 10)
        raise RuntimeError("the engine broke")
    assert bar.done == 3  # what was shown stays; the part's end is not claimed
    tick(10, 10)  # the part is closed: nothing is listening
    assert bar.done == 3 and len(lines()) == 1


def test_an_early_stop_ends_with_done_and_the_status(lines) -> None:
    bar = Progress("toy model", 2000, unit="step")
    bar.update(400)
    bar.note("loss 0.010")
    bar.close()
    assert lines()[-1].startswith("toy model: 400/2,000 steps (20%)")
    assert lines() == [] and "loss 0.010, done" in bar.line(final=True)


def test_an_interrupted_line_says_stopped_not_done(lines) -> None:
    """Ctrl-C (or a failure) while the work runs: the last line is the count where it stopped."""
    bar = Progress("work", 100, unit="prompt")
    with pytest.raises(KeyboardInterrupt):
        try:
            bar.update(30)
            raise KeyboardInterrupt
        finally:
            bar.close()
    last = lines()[-1]
    assert last.startswith("work: 30/100 prompts (30%)") and last.endswith(", stopped"), last
