"""SQL of ``traffic_rollups`` shared by the row upsert (``rows``) and the checkpoint store
that writes rows in SQL (``store_postgres``); plain text, so neither needs SQLAlchemy
to use it."""

from __future__ import annotations

# Rows carry absolute sums: an equal row is left untouched (generated_at and updated_at
# stay), and a frozen day row is only replaced by another frozen one.
ROLLUP_COLUMNS = """domain, granularity, bucket_start, method, path, bucket_end, business_date,
        response_bytes, request_bytes, request_bytes_known_count, total_requests,
        status_1xx, status_2xx, status_3xx, status_4xx, status_5xx, status_other,
        source_server, generated_at, frozen"""
ON_CONFLICT_UPDATE = """
    ON CONFLICT (domain, granularity, bucket_start, method, path) DO UPDATE SET
        bucket_end = EXCLUDED.bucket_end,
        business_date = EXCLUDED.business_date,
        response_bytes = EXCLUDED.response_bytes,
        request_bytes = EXCLUDED.request_bytes,
        request_bytes_known_count = EXCLUDED.request_bytes_known_count,
        total_requests = EXCLUDED.total_requests,
        status_1xx = EXCLUDED.status_1xx, status_2xx = EXCLUDED.status_2xx,
        status_3xx = EXCLUDED.status_3xx, status_4xx = EXCLUDED.status_4xx,
        status_5xx = EXCLUDED.status_5xx, status_other = EXCLUDED.status_other,
        source_server = EXCLUDED.source_server,
        generated_at = EXCLUDED.generated_at,
        frozen = EXCLUDED.frozen,
        updated_at = now()
    WHERE (NOT t.frozen OR EXCLUDED.frozen)
      AND (t.bucket_end, t.business_date, t.response_bytes, t.request_bytes,
           t.request_bytes_known_count, t.total_requests, t.status_1xx, t.status_2xx,
           t.status_3xx, t.status_4xx, t.status_5xx, t.status_other, t.source_server, t.frozen)
          IS DISTINCT FROM
          (EXCLUDED.bucket_end, EXCLUDED.business_date, EXCLUDED.response_bytes,
           EXCLUDED.request_bytes, EXCLUDED.request_bytes_known_count, EXCLUDED.total_requests,
           EXCLUDED.status_1xx, EXCLUDED.status_2xx, EXCLUDED.status_3xx, EXCLUDED.status_4xx,
           EXCLUDED.status_5xx, EXCLUDED.status_other, EXCLUDED.source_server, EXCLUDED.frozen)
"""
