"""Signals billing sends for apps above it to act on, so billing imports none of them."""

from __future__ import annotations

from django.dispatch import Signal

# Once per notified budget alert (the highest threshold a check crossed), after its e-mail, with
# ``alert`` (BudgetAlert) and ``payload`` (a JSON-ready description). The webhooks app delivers
# it to the team's team-wide endpoints.
budget_alert_notified = Signal()
