"""Index names, index templates and the stored merge script of the Elasticsearch store (STO-1).

Indices (``<prefix>`` is ``[elasticsearch] index_prefix``, default ``netmap``):

* ``<prefix>-facts-YYYY.MM`` — raw facts by month of ``observed_at``;
* ``<prefix>-execution-endpoints`` — the shared execution-endpoint projection;
* ``<prefix>-assets-global`` and ``<prefix>-assets-user`` — current assets.

Mappings are explicit and strict (an unknown field is a bug, reported per item):
``ip`` for addresses, ``keyword`` for exact-match fields, ``wildcard`` for banner
text (substring search), ``date_nanos`` for times (microsecond instants, as the
merge compares them), ``long``/``integer`` for ids and ports. ``details`` and a
fact's ``body`` are kept in ``_source`` but not indexed; an observation fact also
carries its ``endpoint`` (``ip port transport``) as a keyword, to find the facts
of an endpoint (ING-18).

``MERGE_SCRIPT`` is the Painless form of ``app.search.documents.merge_endpoints``
used by scripted upserts: the oldest (first_seen, first_execution_id) pair and
the newest (last_seen, last_execution_id, observation_key) group win, except the
probed fields (``params.probed``, ``documents.PROBED_FIELDS``), each of which keeps
the value of the version that observed it last (``observed`` holds those times), and
the probed documents of ``details`` (``params.groups``, ``documents.DETAIL_GROUPS``),
each kept the same way with the ``facts`` read from it (``params.group_facts``); ties
of time are decided by the document's identity (``documents.group_identity``). Times are
fixed-width UTC text (``app.search.encoding.utc_text``), so comparing the
strings compares the instants; an unchanged document is a ``noop``.
"""

from __future__ import annotations

from typing import Any

from app.search.documents import DETAIL_GROUPS, PROBED_FIELDS
from app.search.endpoint_facts import FACT_FIELDS, FACT_INDEX_NAMES

TEMPLATE_PRIORITY = 200  # above the built-in templates (100), which never match our names anyway

MERGE_SCRIPT = """
String identity(def value, List keys) {
  StringBuilder text = new StringBuilder();
  for (int i = 0; i < keys.size(); ++i) {
    if (i > 0) {
      text.append((char) 31);
    }
    if (value instanceof Map) {
      def part = ((Map) value).get(keys.get(i));
      if (part instanceof String) {
        text.append((String) part);
      }
    }
  }
  return text.toString();
}
String seenAt(def value, Map seen, String name, Map version) {
  if (value == null) {
    return null;
  }
  return seen.containsKey(name) ? (String) seen[name] : (String) version.last_seen;
}
Map d = params.doc;
Map s = ctx._source;
if (s.isEmpty()) {
  s.putAll(d);
} else {
  boolean changed = false;
  int older = ((String) d.first_seen).compareTo((String) s.first_seen);
  if (older == 0) {
    older = Long.compare(((Number) d.first_execution_id).longValue(),
                         ((Number) s.first_execution_id).longValue());
  }
  if (older < 0) {
    s.first_seen = d.first_seen;
    s.first_execution_id = d.first_execution_id;
    changed = true;
  }
  String lastSeen = ((String) d.last_seen).compareTo((String) s.last_seen) > 0
      ? (String) d.last_seen : (String) s.last_seen;
  Map dSeen = d.containsKey('observed') && d.observed != null ? d.observed : new HashMap();
  Map sSeen = s.containsKey('observed') && s.observed != null ? s.observed : new HashMap();
  Map values = new HashMap();
  Map seen = new HashMap();
  for (String name : params.probed) {
    Object mine = s[name];
    Object theirs = d[name];
    String mineAt = seenAt(mine, sSeen, name, s);
    String theirsAt = seenAt(theirs, dSeen, name, d);
    boolean take = false;
    if (theirsAt != null) {
      if (mineAt == null) {
        take = true;
      } else {
        int c = theirsAt.compareTo(mineAt);
        take = c > 0 || (c == 0 && ((String) theirs).compareTo((String) mine) > 0);
      }
    }
    values[name] = take ? theirs : mine;
    String at = take ? theirsAt : mineAt;
    if (at != null && !at.equals(lastSeen)) {
      seen[name] = at;
    }
  }
  Map sDetails = s.details instanceof Map ? new HashMap((Map) s.details) : new HashMap();
  Map dDetails = d.details instanceof Map ? (Map) d.details : new HashMap();
  Map sFacts = s.facts instanceof Map ? new HashMap((Map) s.facts) : new HashMap();
  Map dFacts = d.facts instanceof Map ? (Map) d.facts : new HashMap();
  Map fromD = new HashMap();
  for (def group : params.groups.entrySet()) {
    String name = group.getKey();
    Object mine = sDetails.get(name);
    Object theirs = dDetails.get(name);
    String mineAt = seenAt(mine, sSeen, name, s);
    String theirsAt = seenAt(theirs, dSeen, name, d);
    boolean take = false;
    if (theirsAt != null) {
      if (mineAt == null) {
        take = true;
      } else {
        int c = theirsAt.compareTo(mineAt);
        if (c == 0) {
          c = identity(theirs, group.getValue()).compareTo(identity(mine, group.getValue()));
        }
        take = c > 0;
      }
    }
    fromD[name] = take;
    String at = take ? theirsAt : mineAt;
    if (at != null && !at.equals(lastSeen)) {
      seen[name] = at;
    }
  }
  int newer = ((String) d.last_seen).compareTo((String) s.last_seen);
  if (newer == 0) {
    newer = Long.compare(((Number) d.last_execution_id).longValue(),
                         ((Number) s.last_execution_id).longValue());
  }
  if (newer == 0) {
    newer = ((String) d.observation_key).compareTo((String) s.observation_key);
  }
  if (newer > 0) {
    for (def entry : d.entrySet()) {
      String key = entry.getKey();
      if (key != 'first_seen' && key != 'first_execution_id') {
        s[key] = entry.getValue();
      }
    }
    changed = true;
  }
  for (String name : params.probed) {
    if (s[name] != values[name]) {
      s[name] = values[name];
      changed = true;
    }
  }
  Map details = s.details instanceof Map ? new HashMap((Map) s.details) : new HashMap();
  Map facts = s.facts instanceof Map ? new HashMap((Map) s.facts) : new HashMap();
  for (def group : params.groups.entrySet()) {
    String name = group.getKey();
    boolean take = fromD[name];
    Object value = take ? dDetails.get(name) : sDetails.get(name);
    if (value == null) {
      continue;  // neither has one: the newest's details and facts stay as they are
    }
    details[name] = value;
    for (String fact : params.group_facts[name]) {
      Object typed = take ? dFacts.get(fact) : sFacts.get(fact);
      if (typed == null) {
        facts.remove(fact);
      } else {
        facts[fact] = typed;
      }
    }
  }
  if (!details.equals(s.details)) {
    s.details = details;
    changed = true;
  }
  if (!facts.equals(s.facts) && !(facts.isEmpty() && s.facts == null)) {
    s.facts = facts;
    changed = true;
  }
  if (seen.isEmpty()) {
    if (s.containsKey('observed')) {
      s.remove('observed');
      changed = true;
    }
  } else if (!seen.equals(s.observed)) {
    s.observed = seen;
    changed = true;
  }
  if (!changed) {
    ctx.op = 'noop';
  }
}
""".strip()

# The script's parameters besides the document: what it merges as probed, and which
# typed facts go with each details document.
MERGE_PARAMS: dict[str, Any] = {
    "probed": list(PROBED_FIELDS),
    "groups": {name: list(keys) for name, keys in DETAIL_GROUPS.items()},
    "group_facts": {
        name: [FACT_INDEX_NAMES[f] for f, (section, _, _) in FACT_FIELDS.items() if section == name]
        for name in DETAIL_GROUPS
    },
}


class IndexNames:
    """Every name the store uses, derived from the prefix."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.execution_endpoints = f"{prefix}-execution-endpoints"
        self.assets = {"global": f"{prefix}-assets-global", "user": f"{prefix}-assets-user"}
        self.facts_pattern = f"{prefix}-facts-*"
        self.merge_script = f"{prefix}-merge-endpoint"
        self.templates = {
            f"{prefix}-facts": [self.facts_pattern],
            f"{prefix}-execution-endpoints": [self.execution_endpoints],
            f"{prefix}-assets": [f"{prefix}-assets-*"],
        }

    def facts(self, month: str) -> str:
        """``2026.11`` → ``netmap-facts-2026.11``."""
        return f"{self.prefix}-facts-{month}"

    def endpoint_index(self, scope: str) -> str:
        return self.execution_endpoints if scope == "execution" else self.assets[scope]


_ID = {"type": "long"}
_KEYWORD = {"type": "keyword", "ignore_above": 1024}
_TIME = {"type": "date_nanos", "format": "strict_date_optional_time_nanos"}

FACT_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "kind": {"type": "keyword"},
        "execution_id": _ID,
        "task_id": _ID,
        "owner_id": _ID,
        "scanner_id": _ID,
        "upload_id": {"type": "keyword"},
        "stream": {"type": "keyword"},
        "batch_index": {"type": "integer"},
        "position": {"type": "integer"},
        "observed_at": _TIME,
        "body": {"type": "object", "enabled": False},
        # An observation's endpoint ("ip port transport"): finds the facts of an endpoint
        # when a dead attempt's batch is removed (ING-18), since ``body`` is not indexed.
        "endpoint": {"type": "keyword"},
    },
}

# The field added to fact indices created before it existed.
FACT_ENDPOINT_MAPPING: dict[str, Any] = {"properties": {"endpoint": {"type": "keyword"}}}


def fact_endpoint(ip: str, port: int, transport: str) -> str:
    """The ``endpoint`` keyword of an observation fact."""
    return f"{ip} {port} {transport}"


ENDPOINT_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "doc_id": {"type": "keyword"},
        "scope": {"type": "keyword"},
        "ip": {"type": "ip"},
        "port": {"type": "integer"},
        "transport": {"type": "keyword"},
        "first_seen": _TIME,
        "first_execution_id": _ID,
        "last_seen": _TIME,
        "last_execution_id": _ID,
        "observation_key": {"type": "keyword"},
        "owner_id": _ID,
        "execution_id": _ID,
        "task_id": _ID,
        "state": {"type": "keyword"},
        "service": _KEYWORD,
        "product": _KEYWORD,
        "version": _KEYWORD,
        "banner": {"type": "wildcard"},
        "hostname": _KEYWORD,
        "tags": {"type": "keyword"},
        "details": {"type": "object", "enabled": False},
        # When each probed field's value was observed, where not ``last_seen`` (merge).
        "observed": {"type": "object", "enabled": False},
        # Certificate and HTTP facts of ``details``, typed for search (endpoint_facts).
        "facts": {"properties": {}},
        # Current assets only, written by the change analysis (never by the merge script).
        "status": {"type": "keyword"},
        "gone_since": _TIME,
        "gone_execution_id": _ID,
    },
}

# Text facts are keywords (substring search by wildcard query, like product and hostname):
# few distinct values (issuers, titles), and the facets aggregate on them.
_FACT_TYPES = {
    "text": _KEYWORD,
    "keyword": _KEYWORD,
    "list": _KEYWORD,
    "fingerprint": _KEYWORD,
    "time": {"type": "keyword"},
    "boolean": {"type": "boolean"},
    "count": {"type": "integer"},
}
ENDPOINT_MAPPING["properties"]["facts"] = {
    "properties": {
        FACT_INDEX_NAMES[name]: _FACT_TYPES[kind] for name, (_s, _k, kind) in FACT_FIELDS.items()
    }
}
# The ``facts`` fields added to endpoint indices created before them.
FACTS_MAPPING: dict[str, Any] = {"properties": {"facts": ENDPOINT_MAPPING["properties"]["facts"]}}

# The fields the change analysis adds to existing asset indices (ANA-4), and the probed
# fields' observation times (docs/changes.md) added to every endpoint index.
STATUS_MAPPING: dict[str, Any] = {
    "properties": {
        "status": {"type": "keyword"},
        "gone_since": _TIME,
        "gone_execution_id": _ID,
        "observed": {"type": "object", "enabled": False},
    }
}
OBSERVED_MAPPING: dict[str, Any] = {
    "properties": {"observed": {"type": "object", "enabled": False}}
}


def index_templates(names: IndexNames, *, shards: int, replicas: int) -> dict[str, dict[str, Any]]:
    """Composable index templates by name (``PUT /_index_template/<name>`` bodies)."""
    settings = {"number_of_shards": shards, "number_of_replicas": replicas}
    mappings = {
        f"{names.prefix}-facts": FACT_MAPPING,
        f"{names.prefix}-execution-endpoints": ENDPOINT_MAPPING,
        f"{names.prefix}-assets": ENDPOINT_MAPPING,
    }
    return {
        name: {
            "index_patterns": patterns,
            "priority": TEMPLATE_PRIORITY,
            "template": {"settings": settings, "mappings": mappings[name]},
            "_meta": {"managed_by": "netmap"},
        }
        for name, patterns in names.templates.items()
    }
