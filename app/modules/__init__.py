"""The module runtime: slots, generations with leases, hot swap with drain, worker IPC, releases.

A *module* is a swappable implementation of a capability (today only the report
renderer). The host describes what it accepts in a ``ModuleSlot``; the
``ModuleRegistry`` routes each call to the current *generation* through a
lease, swaps generations under a short lock and drains the old one. The
selection of which release runs lives in the database (``selection``) and is
applied by every process's refresh loop (``service``). ``wire`` is the frame
protocol shared with worker processes and imports only the standard library,
because it is also packed into the separately built worker.
"""
