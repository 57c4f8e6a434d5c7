"""How spend is told in `escalation.md`: this run's and today's tokens and dollars, each against its budget.

The amounts are written by `format.share` and `format.dollars_share`, as `watch` and the report write them.

    >>> spend_lines(tokens=7200, cost_usd=1.2, token_budget=100_000, cost_budget=5.0, daily_tokens=7200,
    ...             daily_cost_usd=1.2, daily_token_budget=0, daily_cost_budget=0.0)[0]
    '- **This run:** tokens 7,200 of 100,000 (7 %); dollars $1.20 of $5.00 (24 %)'
"""

from __future__ import annotations

from ralph_supervisor.format import dollars_share, share


def spend_lines(*, tokens: int, cost_usd: float | None, token_budget: int, cost_budget: float,
                daily_tokens: int, daily_cost_usd: float, daily_token_budget: int,
                daily_cost_budget: float) -> list[str]:
    """Markdown bullets: this run's spend and today's (UTC, every run in the folder), each against its budget."""
    today_cost = daily_cost_usd if (daily_cost_usd or cost_usd is not None) else None
    return [
        f"- **This run:** tokens {share(tokens, token_budget)}; dollars {dollars_share(cost_usd, cost_budget)}",
        f"- **Today (UTC, every run in this state folder):** tokens {share(daily_tokens, daily_token_budget)}; "
        f"dollars {dollars_share(today_cost, daily_cost_budget)}",
    ]
