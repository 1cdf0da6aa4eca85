"""The module contract (MOD-1) and the host's ``ModuleSlot``.

A module implementation (in-process builtin or worker process) offers
``contract()``, ``self_test()``, ``invoke(method, payload)``, ``shutdown()``
and ``available()``. The host never trusts the implementation's idea of its
own limits: the slot fixes which methods may be called, the JSON schemas of
input and output, how much work may run at once, the payload size and the
time a caller waits. Schemas are validated with ``jsonschema`` (compiled once
per slot); payload size is measured on the compact JSON encoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from app.modules.errors import ErrorKind, ModuleError


@dataclass(frozen=True)
class ModuleContract:
    """What an implementation says about itself after preparation (handshake)."""

    name: str
    release_id: str
    rpc_version: int
    methods: tuple[str, ...]
    details: Mapping[str, Any] = field(default_factory=dict)


class Module(Protocol):
    def contract(self) -> ModuleContract: ...

    def self_test(self) -> None:
        """Raise ``CandidateRejected`` unless the implementation renders the fixed sample right."""

    def invoke(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one call to completion (or to the IPC timeout); raises ``ModuleError``."""

    def shutdown(self, timeout: float) -> None: ...

    def available(self) -> bool: ...


@dataclass(frozen=True)
class MethodSpec:
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    # Extra host-side checks of a result against its input (size, echo, …).
    check_output: Callable[[dict[str, Any], dict[str, Any]], None] | None = None


@dataclass(frozen=True)
class ModuleSlot:
    name: str
    methods: Mapping[str, MethodSpec]
    max_in_flight: int
    max_payload_bytes: int
    wait_timeout_seconds: float
    _validators: dict[str, tuple[Any, Any]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for method, spec in self.methods.items():
            input_cls = jsonschema.validators.validator_for(spec.input_schema)
            output_cls = jsonschema.validators.validator_for(spec.output_schema)
            input_cls.check_schema(spec.input_schema)
            output_cls.check_schema(spec.output_schema)
            self._validators[method] = (
                input_cls(spec.input_schema),
                output_cls(spec.output_schema),
            )

    def check_contract(self, contract: ModuleContract) -> str | None:
        """None when the implementation offers every method the slot calls, else why not."""
        if contract.name != self.name:
            return f"implementation is module {contract.name!r}, slot is {self.name!r}"
        missing = sorted(set(self.methods) - set(contract.methods))
        if missing:
            return f"implementation lacks methods {missing}"
        return None

    def validate_input(self, method: str, payload: Any) -> None:
        if method not in self.methods:
            raise ModuleError(
                ErrorKind.EXECUTION, "method_not_allowed", f"{self.name} does not allow {method!r}"
            )
        size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())
        if size > self.max_payload_bytes:
            raise ModuleError(
                ErrorKind.EXECUTION,
                "payload_too_large",
                f"payload of {size} bytes exceeds {self.max_payload_bytes}",
            )
        error = jsonschema.exceptions.best_match(self._validators[method][0].iter_errors(payload))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ModuleError(ErrorKind.EXECUTION, "invalid_input", f"{where}: {error.message}")

    def validate_output(self, method: str, payload: dict[str, Any], result: Any) -> None:
        error = jsonschema.exceptions.best_match(self._validators[method][1].iter_errors(result))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ModuleError(ErrorKind.EXECUTION, "invalid_output", f"{where}: {error.message}")
        check = self.methods[method].check_output
        if check is not None:
            check(payload, result)
