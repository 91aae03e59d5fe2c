"""broker.conf as RocketMQ reads it: the java.util.Properties text rules, the table of keys onto
BrokerConfig/StoreConfig (every field reachable, units converted), the environment, and the
file rewritten by UPDATE_BROKER_CONFIG."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.config_properties import (
    DERIVED,
    IGNORED,
    SETTINGS,
    ConfigProblem,
    apply_settings,
    config_properties,
    environment_settings,
    field_value,
    find_setting,
    markdown_rows,
    read_config_file,
    rewrite_config_file,
)
from pocketmq.broker.protocol.properties import (
    PropertiesSyntaxError,
    format_properties,
    parse_entries,
    parse_properties,
)
from pocketmq.store.config import StoreConfig
from pocketmq.store.record import RecordLimits

ROOT = Path(__file__).resolve().parents[2]

# -- the text rules -----------------------------------------------------------------------------


def test_separators_comments_and_blanks() -> None:
    text = "# a comment\n! another\n   \na=1\nb: 2\nc 3\n  d   =   4  \ne\nf=\ng==x\nh = x = y\n"
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4  ",  # the value keeps its trailing blanks, as Java's
        "e": "",
        "f": "",
        "g": "=x",
        "h": "x = y",
    }


def test_line_continuations_and_their_lines() -> None:
    text = "x=1\nlevels=1s 5s \\\n    10s \\\n  30s\n# c \\\ny=2\nz=a\\\\\nw=3"
    entries = parse_entries(text)
    assert [(e.key, e.value, e.first_line, e.last_line) for e in entries] == [
        ("x", "1", 1, 1),
        ("levels", "1s 5s 10s 30s", 2, 4),
        ("y", "2", 6, 6),  # a comment never goes on to the next line
        ("z", "a\\", 7, 7),  # an even number of backslashes ends the line
        ("w", "3", 8, 8),
    ]


def test_escapes_and_line_endings() -> None:
    text = "k\\ ey=a\\tb\\nc\\u0041\\uD83D\\uDE00\\q\r\nk2\\:x=\\ lead\rk3=v"
    assert parse_properties(text) == {
        "k ey": "a\tb\ncA\U0001f600q",
        "k2:x": " lead",
        "k3": "v",
    }


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(PropertiesSyntaxError, match="line 2: malformed"):
        parse_properties("a=1\nb=\\u12G4\n")


def test_the_last_of_a_repeated_key_wins() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


_KEYS = st.text(min_size=1, max_size=20)
_VALUES = st.text(max_size=40)


@given(st.dictionaries(_KEYS, _VALUES, max_size=8))
def test_what_is_written_reads_back(pairs: dict[str, str]) -> None:
    assert parse_properties(format_properties(sorted(pairs.items()))) == pairs


def test_plain_values_are_written_as_rocketmq_writes_them() -> None:
    # MixAll.properties2String: key=value and a newline, nothing escaped
    assert format_properties([("deleteWhen", "04"), ("namesrvAddr", "a;b")]) == (
        "deleteWhen=04\nnamesrvAddr=a;b\n"
    )


# -- the table ----------------------------------------------------------------------------------


def _fields(struct_type: type, prefix: str = "") -> set[str]:
    names = set()
    for field in msgspec.structs.fields(struct_type):
        if field.type in (StoreConfig, RecordLimits):
            names |= _fields(field.type, f"{prefix}{field.name}.")
        else:
            names.add(prefix + field.name)
    return names


def test_every_field_has_a_key_or_a_reason() -> None:
    """Fails when a field is added to BrokerConfig, StoreConfig or RecordLimits without a row in
    broker/config_properties.py (its RocketMQ name and unit, or its camelCase name)."""
    fields = _fields(BrokerConfig)
    mapped = {setting.field for setting in SETTINGS}
    assert fields - mapped - set(DERIVED) == set(), "add these to SETTINGS"
    assert mapped - fields == set(), "these are no longer fields"
    assert set(DERIVED) <= fields


def test_keys_are_rocketmq_names_or_camel_case_of_the_field() -> None:
    for setting in SETTINGS:
        if not setting.rocketmq:
            leaf = setting.field.rsplit(".", 1)[-1]
            camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), leaf)
            assert setting.key == camel, setting
        assert find_setting(setting.key) is setting
        for alias in setting.aliases:
            assert find_setting(alias) is setting
    assert find_setting("mapedFileSizeCommitLog") is find_setting("mappedFileSizeCommitLog")
    envs = [setting.env for setting in SETTINGS]
    assert len(set(envs)) == len(envs), "two fields share an environment variable"
    assert not set(IGNORED) & {s.key for s in SETTINGS}


def test_live_settings_are_broker_fields() -> None:
    # UPDATE_BROKER_CONFIG sets them on BrokerConfig; the store's settings are frozen
    for setting in SETTINGS:
        if setting.live:
            assert "." not in setting.field, setting


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_each_default_round_trips_through_its_text(setting) -> None:
    value = field_value(BrokerConfig(), setting.field)
    if setting.key == "accessKeys":
        return  # written with the secrets hidden
    assert setting.kind.parse(setting.kind.format(value)) == value


def test_rocketmq_units_are_converted() -> None:
    values = {
        "fileReservedTime": ("48", "file_reserved_time_h", 48.0),
        "registerNameServerPeriod": ("10000", "register_interval_s", 10.0),
        "timerMaxDelaySec": ("60", "timer_max_delay_ms", 60_000),
        "mappedFileSizeConsumeQueue": ("6000000", "store.consume_queue_entries_per_file", 300_000),
        "flushDiskType": ("SYNC_FLUSH", "flush", "sync"),
        "namesrvAddr": (
            "10.0.0.1:9876; 10.0.0.2:9876",
            "namesrv_addrs",
            ["10.0.0.1:9876", "10.0.0.2:9876"],
        ),
        "storePathRootDir": ("/var/mq", "data_dir", Path("/var/mq")),
        "brokerIP1": ("", "advertised_host", None),
        "cleanResourceInterval": ("250", "clean_resource_interval_s", 0.25),
    }
    for key, (text, field, expected) in values.items():
        setting = find_setting(key)
        assert setting is not None and setting.field == field
        assert setting.kind.parse(text) == expected, key
        assert setting.kind.format(expected).replace(" ", "") == text.replace(" ", ""), key


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("listenPort", "port", "a whole number from 0 to 65535, got 'port'"),
        ("listenPort", "70000", "from 0 to 65535"),
        ("autoCreateTopicEnable", "ture", "expected true or false, got 'ture'"),
        ("flushDiskType", "SOMETIMES", "one of SYNC_FLUSH, ASYNC_FLUSH"),
        ("messageDelayLevel", "1s 5x", "levels like"),
        ("deleteWhen", "25", "hours of the day"),
        ("namesrvAddr", "nohost", '"host:port"'),
        ("mappedFileSizeConsumeQueue", "1001", "a multiple of 20"),
        ("fileReservedTime", "-1", "at least 0"),
        ("brokerName", "   ", "some text"),
        ("accessKeys", "ak-only", "pairs"),
    ],
)
def test_bad_values_say_what_was_expected(key: str, text: str, expected: str) -> None:
    setting = find_setting(key)
    assert setting is not None
    with pytest.raises(ValueError, match=re.escape(expected)):
        setting.kind.parse(text)


def test_get_broker_config_lists_every_key_sorted() -> None:
    pairs = config_properties(BrokerConfig(port=10911, namesrv_addrs=["a:1", "b:2"]))
    keys = [key for key, _ in pairs]
    assert keys == sorted(keys) == sorted(s.key for s in SETTINGS)
    assert dict(pairs)["namesrvAddr"] == "a:1;b:2"
    assert dict(pairs)["flushDiskType"] == "ASYNC_FLUSH"
    hidden = config_properties(BrokerConfig(access_keys={"admin": "s3cret"}))
    assert dict(hidden)["accessKeys"] == "admin:******"


# -- files, the environment, precedence ---------------------------------------------------------


def test_a_file_sets_fields_and_names_what_it_ignores(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(
        "brokerClusterName=C1\nbrokerName = b1\nbrokerRole=ASYNC_MASTER\nfooBar=1\n"
        "mapedFileSizeCommitLog=134217728\nmaxMessageSize=1048576\n"
    )
    settings = read_config_file(path)
    assert settings.values == {
        "cluster_name": "C1",
        "broker_name": "b1",
        "store.commitlog_segment_size": 134217728,
        "store.limits.body_size_max": 1048576,
    }
    warning = settings.warning()
    assert warning is not None
    assert "fooBar (line 4)" in warning and "brokerRole (line 3: no replication" in warning
    assert str(path) in warning
    config = apply_settings(BrokerConfig(), settings.values)
    assert config.store.commitlog_segment_size == 134217728
    assert config.store.limits.body_size_max == 1048576
    assert config.store.delay_levels == StoreConfig().delay_levels


def test_a_bad_value_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("brokerName=b\n\n# x\nlistenPort=ten\n")
    with pytest.raises(ConfigProblem) as caught:
        read_config_file(path)
    assert str(caught.value) == (
        f"{path}:4: listenPort: expected a whole number from 0 to 65535, got 'ten'"
    )


def test_a_missing_file_and_a_store_refusal_are_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigProblem, match="cannot read"):
        read_config_file(tmp_path / "nope.conf")
    with pytest.raises(ConfigProblem, match="commitlog_segment_size"):
        apply_settings(BrokerConfig(), {"store.commitlog_segment_size": 1024})


def test_environment_in_the_fields_own_units() -> None:
    values = environment_settings(
        {
            "POCKETMQ_FLUSH": "sync",
            "POCKETMQ_FILE_RESERVED_TIME_H": "12",
            "POCKETMQ_REGISTER_INTERVAL_S": "2.5",
            "POCKETMQ_DELAY_LEVELS": "1s 2s",
            "POCKETMQ_BODY_SIZE_MAX": "1000",
            "POCKETMQ_DATA_DIR": "",
            "POCKETMQ_UNRELATED": "x",
        }
    )
    assert values == {
        "flush": "sync",
        "file_reserved_time_h": 12.0,
        "register_interval_s": 2.5,
        "store.delay_levels": "1s 2s",
        "store.limits.body_size_max": 1000,
        "data_dir": None,
    }
    assert environment_settings({"POCKETMQ_FLUSH": "SYNC_FLUSH"}) == {"flush": "sync"}
    with pytest.raises(ConfigProblem, match="^POCKETMQ_PORT: expected a whole number"):
        environment_settings({"POCKETMQ_PORT": "x"})


def test_later_layers_win() -> None:
    config = apply_settings(
        BrokerConfig(), {"port": 1, "broker_name": "file"}, {"port": 2}, {"broker_name": "flag"}
    )
    assert (config.port, config.broker_name) == (2, "flag")


def test_rewrite_keeps_comments_and_replaces_in_place(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(
        "# my broker\nbrokerName=b\nfileReservedTime = 72\nmessageDelayLevel=1s \\\n  2s\n"
        "fileReservedTime=60\n"
    )
    rewrite_config_file(path, {"fileReservedTime": "24", "deleteWhen": "02;14"})
    assert path.read_text() == "# my broker\nbrokerName=b\nfileReservedTime=24\n" + (
        "messageDelayLevel=1s \\\n  2s\ndeleteWhen=02;14\n"
    )
    assert parse_properties(path.read_text())["fileReservedTime"] == "24"


@pytest.mark.checkout  # reads docs/, which a wheel does not ship
def test_the_docs_list_every_key() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for row in markdown_rows():
        assert row in doc, (
            f"docs/configuration.md lacks this row (markdown_rows() prints them all): {row}"
        )
    for key in IGNORED:
        assert f"`{key}`" in doc, key
