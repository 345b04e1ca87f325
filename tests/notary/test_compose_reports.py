"""docker-compose.yml: the locust master can write its reports folder. Docker creates a
missing bind-mounted host folder as root, and locust runs as the image's user (uid 10001,
Dockerfile): a root service mounting the same folder hands it over first, and the master
waits for it to complete. The twin: without that dependency the check fails."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def image_uid() -> str:
    found = re.search(r"useradd --uid (\d+)", (ROOT / "Dockerfile").read_text())
    assert found
    return found.group(1)


def problems(compose: dict[str, Any]) -> list[str]:
    services = compose["services"]
    master = services["locust-master"]
    host = next(v.split(":")[0] for v in master["volumes"] if v.endswith(":/reports"))
    out = []
    preparers = [
        name for name, svc in services.items()
        if svc.get("user") == "root" and f"{host}:/reports" in svc.get("volumes", [])
        and f"chown {image_uid()} /reports" in " ".join(svc.get("command", []))
    ]
    if not preparers:
        out.append(f"no root service hands {host} to uid {image_uid()}")
    deps = master.get("depends_on", {})
    if not any(deps.get(p, {}).get("condition") == "service_completed_successfully"
               for p in preparers):
        out.append("locust-master does not wait for the reports folder to be handed over")
    return out


def test_reports_folder_is_handed_to_locusts_user() -> None:
    assert problems(yaml.safe_load((ROOT / "docker-compose.yml").read_text())) == []


def test_twin_without_the_dependency() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    del compose["services"]["locust-master"]["depends_on"]["locust-reports"]
    assert problems(compose) == [
        "locust-master does not wait for the reports folder to be handed over"]
