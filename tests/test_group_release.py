"""A held group released together (cassini.agent): a partner's release, or the job's own
by hand, reaches every rank through the planner's decision, in both exchange modes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.agent import GroupRelease, SlotDecision, TimeShiftAgent


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


def _agent(clock: FakeClock, period: float = 0.1) -> TimeShiftAgent:
    return TimeShiftAgent(0.02, period, 100.0, clock=clock, sleep=clock.sleep)


def test_decision_floats_keep_the_release_kind() -> None:
    for by_partner in (False, True):
        d = SlotDecision(1.5, 7, realigned=not by_partner, released=True, by_partner=by_partner)
        assert SlotDecision.from_floats(d.to_floats()) == d
    plain = SlotDecision(1.5, 7)
    assert SlotDecision.from_floats(plain.to_floats()) == plain


def test_partner_release_frees_the_job_at_its_next_decision() -> None:
    clock = FakeClock()
    agent = _agent(clock)
    group = GroupRelease("b", frozenset({"a"}))
    for _ in range(3):
        agent.step()
        clock.t += 0.05  # compute, well inside the 100 ms period
    assert not agent.released
    assert group.check(agent, {"c"}) is None  # not a partner
    assert group.check(agent, {"a"}) == "a"
    before = clock.t
    assert agent.step() == 0.0
    assert agent.released and agent.released_by_partner
    assert "partner a" in (agent.release_reason or "")
    assert clock.t == before  # ran free: no wait for the slot
    assert not group.report_due(agent)  # released with its group: nothing to report


def test_own_release_is_reported_once() -> None:
    clock = FakeClock()
    agent = _agent(clock)
    group = GroupRelease("a", frozenset({"b"}))
    for _ in range(40):  # 150 ms of work in a 100 ms period: it cannot hold it
        agent.step()
        clock.t += 0.15
        if agent.released:
            break
    assert agent.released and not agent.released_by_partner
    assert group.report_due(agent)
    assert not group.report_due(agent)
    assert group.check(agent, {"a", "b"}) is None  # already free


def test_released_by_hand() -> None:
    clock = FakeClock()
    agent = _agent(clock)
    group = GroupRelease("a", frozenset({"b"}))
    agent.step()
    assert group.check(agent, ["a"]) == "a"
    agent.step()
    assert agent.released and "by hand" in (agent.release_reason or "")


def _ring(agents: list[TimeShiftAgent]):
    """An in-process synchronous broadcast: the planner's floats reach every rank."""
    box: list = []

    def broadcast(values):
        if values is not None:
            box[:] = [values]
        return box[0]

    return broadcast


@settings(max_examples=60, deadline=None)
@given(
    ranks=st.integers(1, 4),
    notice_at=st.integers(0, 12),
    ahead=st.booleans(),
)
def test_every_rank_runs_free_together_within_two_iterations(
    ranks: int, notice_at: int, ahead: bool
) -> None:
    """Whatever the iteration the planner learns of the partner's release, every rank
    adopts the same release at the same iteration, at most two iterations later (one in
    sync mode, two when decisions travel an iteration ahead)."""
    clock = FakeClock()
    agents = [_agent(clock) for _ in range(ranks)]
    group = GroupRelease("b", frozenset({"a"}))
    posted: list = [None]
    freed_at: list[int | None] = [None] * ranks
    for k in range(notice_at + 4):
        if k == notice_at:
            group.check(agents[0], {"a"})
        if ahead:
            previous = posted[0]
            for r, agent in enumerate(agents):
                take = lambda previous=previous: previous  # noqa: E731
                post = lambda v: posted.__setitem__(0, v) if v is not None else None  # noqa: E731
                agent.step_ahead(r == 0, post, take)
        else:
            bc = _ring(agents)
            for r, agent in enumerate(agents):
                agent.step(r == 0, bc if ranks > 1 else None)
        for r, agent in enumerate(agents):
            if agent.released and freed_at[r] is None:
                freed_at[r] = k
        clock.t += 0.03
    assert len(set(freed_at)) == 1 and freed_at[0] is not None
    assert freed_at[0] - notice_at <= (2 if ahead else 1)
    assert all(a.released_by_partner for a in agents)


class _Channel:
    """A release channel in memory (the testbed's board or the service, for the test)."""

    def __init__(self, job_id: str, partners: set[str]) -> None:
        self.job_id, self.partners = job_id, frozenset(partners)
        self.board: set[str] = set()
        self.reports: list[str] = []

    def released(self) -> set[str]:
        return set(self.board)

    def report(self, reason: str) -> None:
        self.reports.append(reason)
        self.board.add(self.job_id)


def test_timeshift_reads_the_channel_before_every_iteration() -> None:
    """cassini.torch.TimeShift (one rank): a partner on the channel frees the job at the
    next iteration; the job's own release is reported once."""
    from cassini.torch.timeshift import ShiftSettings, TimeShift

    clock = FakeClock()
    settings = ShiftSettings(True, 0.02, 0.1, 100.0)
    channel = _Channel("b", {"a"})
    shift = TimeShift(settings, channel=channel, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        shift.wait()
        clock.t += 0.05
    assert shift.enabled
    channel.board.add("a")
    before = clock.t
    shift.wait()
    assert not shift.enabled and clock.t == before  # ran free at once
    assert channel.reports == []  # released with its group: nothing to report

    slow = _Channel("a", {"b"})
    clock2 = FakeClock()
    shift2 = TimeShift(settings, channel=slow, clock=clock2, sleep=clock2.sleep)
    for _ in range(40):
        shift2.wait()
        clock2.t += 0.15  # cannot hold a 100 ms period
    assert not shift2.enabled and len(slow.reports) == 1
    assert "missed its slot" in slow.reports[0]
