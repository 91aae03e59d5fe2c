"""docker-compose.yml cannot be run here (no Docker engine); check what can be checked."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from pocketmq.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
# These read the checkout itself (sources, README, CI, compose): not run against a wheel.
pytestmark = pytest.mark.checkout


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def pocketmq_services(compose: dict) -> dict:
    """The services that run the ``pocketmq`` command (the image's entrypoint)."""
    return {name: s for name, s in compose["services"].items() if "entrypoint" not in s}


def test_the_file_parses_and_has_the_cluster() -> None:
    compose = load()
    assert {"namesrv", "broker-a", "broker-b"} <= set(compose["services"])
    assert (ROOT / "Dockerfile").exists()


def test_every_service_command_is_a_valid_pocketmq_command() -> None:
    parser = build_parser()
    for name, service in pocketmq_services(load()).items():
        args = parser.parse_args(service["command"])  # exits (SystemExit) on an unknown option
        assert args.handler is not None, name


def test_ports_and_volumes_agree() -> None:
    compose = load()
    parser = build_parser()
    declared_volumes = set(compose.get("volumes", {}))
    namesrv_port = parser.parse_args(compose["services"]["namesrv"]["command"]).port
    seen_ports = set()
    for name, service in pocketmq_services(compose).items():
        args = parser.parse_args(service["command"])
        published = {int(p.split(":")[0]): int(p.split(":")[1]) for p in service.get("ports", [])}
        assert args.port in published.values(), (
            f"{name} listens on {args.port} but does not publish it"
        )
        if getattr(args, "grpc_port", None) is not None:
            assert args.grpc_port in published.values(), (
                f"{name} serves gRPC on {args.grpc_port} but does not publish it"
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


def test_the_spark_service_exports_both_broker_stores() -> None:
    from pocketmq.sparkexport.submit import build_parser as submit_parser

    compose = load()
    spark = compose["services"]["spark-export"]
    assert spark["build"]["target"] == "spark"
    assert re.search(r"^FROM \S+ AS spark$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert spark["entrypoint"] == ["python", "-m", "pocketmq.sparkexport.submit"]
    assert importlib.util.find_spec("pocketmq.sparkexport.submit") is not None
    args = submit_parser().parse_args(spark["command"])
    assert args.follow and args.format == "parquet"
    mounts = {}
    for volume in spark["volumes"]:
        source, target, *mode = volume.split(":")
        assert source in compose["volumes"], f"{source} is not a declared volume"
        mounts[target] = (source, mode)
    broker_stores = {}
    for name, service in pocketmq_services(compose).items():
        data = build_parser().parse_args(service["command"]).__dict__.get("data")
        if service["command"][0] == "broker":
            volumes = dict(v.split(":")[1::-1] for v in service["volumes"])
            broker_stores[name] = volumes[data]
    assert len(broker_stores) == 2
    assert sorted(mounts[store][0] for store in args.stores) == sorted(broker_stores.values())
    assert all(mounts[store][1] == ["ro"] for store in args.stores), "stores are read-only"
    assert any(args.out.startswith(target + "/") for target in mounts if target not in args.stores)
    assert set(spark["depends_on"]) == set(broker_stores)
    assert "ports" not in spark
