"""The token ledger: where generated tokens went, as the status line and the summary say it."""

from __future__ import annotations

from synthgen.run.ledger import TokenLedger


def test_the_summary_line_accounts_for_every_generated_token():
    ledger = TokenLedger(generated=1000, rows=700, partials=200, stopped=60, failed=40, cut=100, earlier=50)
    assert ledger.rows + ledger.partials + ledger.lost == ledger.generated
    assert ledger.line() == (
        "tokens generated this run: 1,000: 700 in rows (100 of them cut with reasoning open); 200 kept as partial "
        "outputs to continue; 100 lost (60 stop, 40 failed attempts); plus 50 of earlier runs' partial outputs "
        "continued into rows"
    )
    assert ledger.status() == "kept 80% of 1,000 tokens"


def test_ledgers_add_up_over_datasets():
    total = TokenLedger(generated=5, rows=5).add(TokenLedger(generated=3, loops=3))
    assert (total.generated, total.rows, total.loops, total.lost) == (8, 5, 3, 3)
    assert TokenLedger().status() == ""
