"""The columns of an event, in the order the `events` table and every row of it carry them: the
ledger's writer and the team store's hash chain read the same list."""

EVENT_COLUMNS = (
    "seq",
    "ts",
    "wall",
    "campaign",
    "instance_id",
    "machine_id",
    "host_id",
    "offer_id",
    "gpu_name",
    "gpu_dph",
    "storage_dph",
    "actor",
    "kind",
    "phase",
    "ok",
    "reason",
    "detail",
    "intent_seq",
)
