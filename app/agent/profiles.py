"""Scan profiles: what nmap probes for an execution (issue 37).

A task chooses a profile and every execution carries it to the scanner:

* ``quick`` — open ports only (no service detection, no scripts);
* ``standard`` (the default) — service and version detection at light intensity
  (``-sV --version-intensity 2``) with the scripts that read certificates, HTTP
  titles and server headers, and banners;
* ``deep`` — full version intensity (9) and more scripts.

The agent's ``[agent]`` settings stay its own limits: ``max_profile`` is the deepest
profile it runs (a deeper request runs at that one), ``version_intensity`` caps the
intensity, ``service_detection = true`` keeps ``-sV`` on for every profile (as it
always did) and ``nmap_scripts`` are added to every profile that runs ``-sV``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import AgentSettings

PROFILE_ORDER = ("quick", "standard", "deep")
DEFAULT_PROFILE = "standard"
STANDARD_SCRIPTS = ("banner", "ssl-cert", "http-title", "http-server-header")


@dataclass(frozen=True)
class Profile:
    name: str
    service_detection: bool
    version_intensity: int
    scripts: tuple[str, ...]


PROFILES = {
    "quick": Profile("quick", False, 0, ()),
    "standard": Profile("standard", True, 2, STANDARD_SCRIPTS),
    "deep": Profile(
        "deep",
        True,
        9,
        (*STANDARD_SCRIPTS, "http-headers", "ssh-hostkey", "ssl-enum-ciphers", "smb-os-discovery"),
    ),
}


def effective_profile(requested: str | None, settings: AgentSettings) -> Profile:
    """The profile this agent runs for ``requested`` (unknown: the default), at most its
    ``max_profile``."""
    name = requested if requested in PROFILES else DEFAULT_PROFILE
    limit = getattr(settings, "max_profile", "deep")
    if limit in PROFILE_ORDER and PROFILE_ORDER.index(name) > PROFILE_ORDER.index(limit):
        name = limit
    return PROFILES[name]


def nmap_probe_arguments(settings: AgentSettings, profile: Profile | None) -> list[str]:
    """The ``-sV``/``--script`` arguments of a profile under the agent's limits;
    ``profile`` None: the agent's settings alone (executions of a server without profiles)."""
    if profile is None:
        if not settings.service_detection:
            return []
        arguments = ["-sV", "--version-intensity", str(settings.version_intensity)]
        if settings.nmap_scripts:
            arguments += ["--script", ",".join(settings.nmap_scripts)]
        return arguments
    if not (profile.service_detection or settings.service_detection):
        return []
    # The agent's version_intensity is a ceiling; a profile without -sV of its own (quick
    # on an agent that always runs -sV) runs at that ceiling, as before profiles.
    wanted = profile.version_intensity if profile.service_detection else 9
    intensity = min(wanted, settings.version_intensity)
    scripts = list(dict.fromkeys((*profile.scripts, *settings.nmap_scripts)))
    arguments = ["-sV", "--version-intensity", str(intensity)]
    if scripts:
        arguments += ["--script", ",".join(scripts)]
    return arguments
