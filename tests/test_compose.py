"""docker-compose.yml cannot be run here (no Docker engine); check what can be checked."""

from __future__ import annotations

from pathlib import Path

import yaml

from broker.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_file_parses_and_has_the_cluster() -> None:
    compose = load()
    assert {"namesrv", "broker-a", "broker-b"} <= set(compose["services"])
    assert (ROOT / "Dockerfile").exists()


def test_every_service_command_is_a_valid_pocketmq_command() -> None:
    parser = build_parser()
    for name, service in load()["services"].items():
        args = parser.parse_args(service["command"])  # exits (SystemExit) on an unknown option
        assert args.handler is not None, name


def test_ports_and_volumes_agree() -> None:
    compose = load()
    parser = build_parser()
    declared_volumes = set(compose.get("volumes", {}))
    namesrv_port = parser.parse_args(compose["services"]["namesrv"]["command"]).port
    seen_ports = set()
    for name, service in compose["services"].items():
        args = parser.parse_args(service["command"])
        published = {int(p.split(":")[0]): int(p.split(":")[1]) for p in service.get("ports", [])}
        assert args.port in published.values(), (
            f"{name} listens on {args.port} but does not publish it"
        )
        assert not seen_ports & set(published), f"{name} publishes a host port already used"
        seen_ports |= set(published)
        if args.command == "broker":
            assert args.namesrv == f"namesrv:{namesrv_port}", (
                f"{name} points at the wrong name server"
            )
            assert args.advertise == name, f"{name} must advertise its service name"
            mounts = {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}
            assert args.data in mounts, f"{name} keeps its store outside a volume"
            assert mounts[args.data] in declared_volumes
