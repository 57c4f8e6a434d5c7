"""How spend is told: tokens and dollars against their budgets, in the same words everywhere.

A leaf module: `watch`, the report and `escalation.md` all say spend with these.

    >>> share(7200, 100_000)
    '7,200 of 100,000 (7 %)'
    >>> dollars(1.2, 5.0)
    '$1.20 of $5.00 (24 %)'
"""

from __future__ import annotations

from ralph_supervisor import format as fmt


def share(used: float, budget: float) -> str:
    """`7,200 of 100,000 (7 %)`, or the amount alone without a budget."""
    return f"{used:,.0f} of {budget:,.0f} ({100.0 * used / budget:.0f} %)" if budget > 0 else f"{used:,.0f}"


def dollars(used: float | None, budget: float) -> str:
    """`$1.20 of $5.00 (24 %)`; None: no call reported a cost (then what budget there is, is said)."""
    if used is None:
        return "not reported by the agent" + (f" (budget {fmt.dollars(budget)})" if budget > 0 else "")
    if budget > 0:
        return f"{fmt.dollars(used)} of {fmt.dollars(budget)} ({100.0 * used / budget:.0f} %)"
    return fmt.dollars(used)


def spend_lines(*, tokens: int, cost_usd: float | None, token_budget: int, cost_budget: float,
                daily_tokens: int, daily_cost_usd: float, daily_token_budget: int,
                daily_cost_budget: float) -> list[str]:
    """Markdown bullets: this run's spend and today's (UTC, every run in the folder), each against its budget."""
    today_cost = daily_cost_usd if (daily_cost_usd or cost_usd is not None) else None
    return [
        f"- **This run:** tokens {share(tokens, token_budget)}; dollars {dollars(cost_usd, cost_budget)}",
        f"- **Today (UTC, every run in this state folder):** tokens {share(daily_tokens, daily_token_budget)}; "
        f"dollars {dollars(today_cost, daily_cost_budget)}",
    ]
