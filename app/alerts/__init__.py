"""Change alerts (docs/alerts.md): rules over change sets, channels, and the deliveries outbox.

The package owns ``alert_rules``, ``alert_channels``, ``alert_deliveries``,
``alert_condition_marks``, ``alert_run_digests`` and ``alert_searched_pending``.
``evaluate`` turns a committed change set into messages inside the analysis's transaction,
adding to its run's digests, which ``run_digests`` sends once the run is over; where the
search store cannot test assets in that transaction, ``searched_changes`` does it for the
search-filtered rules right after (``pending_searches`` remembers what is still due);
``deliveries`` hands them to the runner under leases; ``senders`` speaks webhook
(Standard Webhooks), email and Apprise through ``outbound``'s address checks.
"""

import logging

# Apprise's messages may contain a channel's URL, which is a secret (it holds tokens):
# the library logs nothing, whichever module of the package loads it first.
logging.getLogger("apprise").setLevel(logging.CRITICAL + 1)
