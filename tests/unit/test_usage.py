"""Per-tenant usage and budgets (``pipeline.features.usage``) over the in-process ledger: what a job
is charged, that a charge applies once, the budget's refusal, and the report's bounds."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from pipeline.domain.jobs import JobStatus, job_record
from pipeline.domain.state import JobState, Phase
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.usage import (
    OTHER_TENANTS,
    BudgetSpentError,
    BudgetState,
    Charge,
    InMemoryUsage,
    Usage,
    capped,
    charge_of,
    check_budget,
    check_spendable,
    next_month,
    usage_report,
)
from pipeline.ingestion.phases import PHASES, run_phase
from pipeline.ingestion.phases.extract import extract_facts
from pipeline.ingestion.phases.finalize import finalize_jobs_batch
from pipeline.memory import Memory
from tests.doubles import ScriptedLLM
from tests.unit.test_phases import NOW, conversation, facts_reply, make_deps, store_of

TODAY = NOW.date()


def test_a_job_is_charged_what_its_record_counts() -> None:
    ledger = InMemoryUsage()
    llm = ScriptedLLM(facts_reply("Alice plays the cello", "Alice lives in Oslo"))
    deps = make_deps(llm, usage=ledger)

    result = Memory(deps).add(conversation(("user", "I play the cello. I live in Oslo.")))

    record = store_of(deps).get_job(result["job_id"])
    assert record is not None
    counts = record.counts
    [day] = ledger.days("acme", TODAY, TODAY)
    assert day.usage == Usage(
        jobs=1,
        memories=2,
        prompt_tokens=counts["prompt_tokens"],
        completion_tokens=counts["completion_tokens"],
        llm_calls=1,
        embeddings=3,  # the new turn (retrieval) and the two facts
    )
    assert counts["embedded"] == 3 and counts["prompt_tokens"] > 0


def test_finalize_run_twice_charges_once() -> None:
    ledger = InMemoryUsage()
    deps = make_deps(ScriptedLLM(facts_reply("Alice swims")), usage=ledger)
    state = JobState(job_id="j1", request=conversation(("user", "I swim")), received_at=NOW)
    for spec in PHASES:
        if spec.phase is not Phase.FINALIZE:
            state = run_phase(spec, state, deps)

    finalize_jobs_batch([state], deps)
    finalize_jobs_batch([state], deps)  # a redelivered task, its state not yet saved as done

    assert ledger.days("acme", TODAY, TODAY)[0].usage.jobs == 1


def test_a_replayed_attempt_is_a_new_charge_and_a_failure_counts_as_failed() -> None:
    ledger = InMemoryUsage()
    state = JobState(job_id="j2", request=conversation(("user", "x")), received_at=NOW)
    failed = job_record(state.with_(counts={"prompt_tokens": 7}), JobStatus.FAILED, NOW)
    again = job_record(
        state.with_(attempts=1, counts={"prompt_tokens": 5, "stored": 1}), JobStatus.SUCCEEDED, NOW
    )

    assert ledger.charge([charge_of(failed), charge_of(failed)]) == 1
    assert ledger.charge([charge_of(again)]) == 1

    usage = ledger.days("acme", TODAY, TODAY)[0].usage
    assert (usage.jobs, usage.failed_jobs, usage.prompt_tokens, usage.memories) == (2, 1, 12, 1)


def test_a_run_is_charged_on_the_utc_day_it_ended() -> None:
    state = JobState(job_id="j3", request=conversation(("user", "x")), received_at=NOW)
    late = datetime(2026, 1, 15, 23, 30, tzinfo=UTC).astimezone()  # any zone: UTC decides
    record = job_record(state, JobStatus.SUCCEEDED, datetime(2026, 1, 16, 0, 30, tzinfo=UTC))
    assert charge_of(record).day == date(2026, 1, 16)
    assert charge_of(job_record(state, JobStatus.SUCCEEDED, late)).day == date(2026, 1, 15)


def spent(ledger: InMemoryUsage, tokens: int, budget: int) -> None:
    ledger.charge([Charge("c1", "acme", TODAY, Usage(jobs=1, prompt_tokens=tokens))])
    ledger.set_budget("acme", budget)


def test_extraction_fails_naming_the_budget_once_the_month_reached_it() -> None:
    ledger = InMemoryUsage()
    spent(ledger, tokens=100, budget=100)
    llm = ScriptedLLM(facts_reply("Alice sings"))
    deps = make_deps(llm, usage=ledger)
    state = JobState(job_id="j4", request=conversation(("user", "I sing")), received_at=NOW)

    with pytest.raises(BudgetSpentError) as refused:
        extract_facts(state, deps)

    reason = refused.value.reason
    assert "monthly token budget of 100" in reason and "100 tokens used in 2026-01" in reason
    assert "PUT /v1/admin/budgets/acme" in reason and "infer=false" in reason
    assert refused.value.retry_after_s == int((next_month(TODAY) - NOW).total_seconds())
    assert llm.calls == []  # refused before the model is asked

    raw = state.with_(request=conversation(("user", "I sing"), infer=False))
    assert extract_facts(raw, deps).facts  # a raw add still runs

    ledger.set_budget("acme", 101)  # raised: extraction works at once
    assert extract_facts(state, deps).facts


def test_no_budget_and_other_tenants_are_not_capped() -> None:
    ledger = InMemoryUsage()
    ledger.charge([Charge("c1", "acme", TODAY, Usage(prompt_tokens=10**9))])
    check_budget(ledger, "acme", NOW)  # no budget set
    ledger.set_budget("other", 1)
    check_budget(ledger, "acme", NOW)
    ledger.set_budget("acme", 10)
    with pytest.raises(BudgetSpentError):
        check_budget(ledger, "acme", NOW)
    # last month's tokens do not count against this month
    check_budget(ledger, "acme", datetime(2026, 2, 1, tzinfo=UTC))
    ledger.set_budget("acme", None)
    check_budget(ledger, "acme", NOW)


def test_next_month_rolls_the_year() -> None:
    assert next_month(date(2026, 12, 31)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert next_month(date(2026, 1, 31)) == datetime(2026, 2, 1, tzinfo=UTC)


def test_the_report_defaults_to_this_month_and_refuses_bad_spans() -> None:
    ledger = InMemoryUsage()
    ledger.charge([Charge("c1", "acme", TODAY, Usage(jobs=2, completion_tokens=3))])
    report = usage_report(ledger, "acme", None, None, NOW)
    assert (report.first, report.last) == (date(2026, 1, 1), TODAY)
    assert len(report.days) == 15 and report.total == Usage(jobs=2, completion_tokens=3)
    assert report.budget.month_tokens == 3 and report.budget.budget is None
    with pytest.raises(InvalidInputError, match="after"):
        usage_report(ledger, "acme", TODAY, date(2026, 1, 1), NOW)
    with pytest.raises(InvalidInputError, match="at most 366 days"):
        usage_report(ledger, "acme", date(2024, 1, 1), TODAY, NOW)


def test_metrics_name_the_tenants_that_use_most_and_sum_the_rest() -> None:
    totals = {f"t{n}": Usage(jobs=1, prompt_tokens=n) for n in range(5)}
    kept = capped(totals, 2)
    assert list(kept) == ["t4", "t3", OTHER_TENANTS]
    assert kept[OTHER_TENANTS] == Usage(jobs=3, prompt_tokens=0 + 1 + 2)
    assert capped(totals, 10) == dict(sorted(totals.items(), key=lambda i: -i[1].tokens))


class UnreachableUsage(InMemoryUsage):
    """A ledger whose storage is down: every budget read fails as Redis down would."""

    def budget_state(self, tenant: str, month: str) -> BudgetState:
        raise TransientError("read the token budget: Redis ConnectionError")


def test_the_intake_accepts_when_the_budget_cannot_be_read_and_extract_waits_for_it() -> None:
    request = conversation(("user", "I sing"))
    check_spendable(request, False, UnreachableUsage(), NOW, at_intake=True)
    with pytest.raises(TransientError):  # extract: retried until the ledger answers
        check_spendable(request, False, UnreachableUsage(), NOW)
