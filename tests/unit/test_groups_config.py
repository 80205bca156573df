"""Parsers of ``groups:`` (per cluster) and ``attribution:`` (top level)."""

from __future__ import annotations

from exporter.groups_config import (
    BUILTIN_RULES,
    AttributionRule,
    GroupsConfig,
    java_pattern,
    parse_attribution,
    parse_groups,
    spring_rule,
)

PATH = "clusters[0].groups"


def test_absent_groups_section_is_disabled_with_defaults() -> None:
    assert parse_groups(None, PATH) == (GroupsConfig(), [])
    assert GroupsConfig().blocked_after_cycles == 3


def test_boolean_shorthand_and_mapping_enable_the_family() -> None:
    assert parse_groups(True, PATH) == (GroupsConfig(enabled=True), [])
    config, problems = parse_groups(
        {
            "allow": ["orders-.*"],
            "deny": "console-.*",
            "per_partition": True,
            "blocked_after_cycles": 5,
            "max_blocked": 10,
        },
        PATH,
    )
    assert problems == []
    assert config == GroupsConfig(
        enabled=True,
        allow=("orders-.*",),
        deny=("console-.*",),
        per_partition=True,
        blocked_after_cycles=5,
        max_blocked=10,
    )
    assert parse_groups({"enabled": False}, PATH)[0].enabled is False


def test_group_matcher_uses_full_matches_and_deny_wins() -> None:
    match = GroupsConfig(allow=("orders-.*", "billing"), deny=("orders-test",)).group_matcher()
    assert [match(g) for g in ("orders-a", "billing", "billing-2", "orders-test")] == [
        True,
        True,
        False,
        False,
    ]


def test_invalid_group_regex_is_named_with_its_path() -> None:
    config, problems = parse_groups({"allow": ["ok", "bad(["]}, PATH)
    assert config.allow == (".*",)
    assert len(problems) == 1
    assert problems[0].startswith(f"{PATH}.allow[1]: invalid regular expression 'bad(['")


def test_wrong_types_unknown_keys_and_bounds_are_reported_together() -> None:
    _, problems = parse_groups(
        {"per_partition": "yes", "blocked_after_cycles": 0, "max_group_series": True, "colour": 1}, PATH
    )
    assert problems == [
        f"{PATH}.per_partition: must be true or false, got 'yes'",
        f"{PATH}.blocked_after_cycles: must be between 1 and 100000",
        f"{PATH}.max_group_series: must be an integer, got True",
        f"{PATH}.colour: unknown key (allowed: allow, blocked_after_cycles, "
        "consumable_check_max_bytes, deny, enabled, max_blocked, max_group_series, "
        "max_partition_series, per_partition)",
    ]
    assert parse_groups("yes", PATH)[1][0].startswith(f"{PATH}: must be true, false or a mapping")


def test_absent_attribution_means_the_builtins() -> None:
    assert parse_attribution(None, "attribution") == (BUILTIN_RULES, [])


def test_user_rules_follow_the_builtins_unless_placed() -> None:
    rules, problems = parse_attribution([{"name": "pay", "pattern": "^pay-"}], "attribution")
    assert problems == []
    assert rules == (*BUILTIN_RULES, AttributionRule("pay", "^pay-"))
    rules, _ = parse_attribution([{"pattern": "^pay-"}, {"builtin": "flink"}], "attribution")
    assert [r.name for r in rules] == ["rule_0", "flink"]


def test_attribution_problems_name_the_entry_and_key() -> None:
    rules, problems = parse_attribution(
        [
            {"pattern": "(unclosed"},
            {"builtin": "storm"},
            {"name": "x"},
            7,
            {"pattern": "a", "colour": "red"},
            {"pattern": "(?P<app_name>x)"},
        ],
        "attribution",
    )
    assert problems[0].startswith(
        "attribution[0].pattern: invalid regular expression '(unclosed': missing ), unterminated subpattern"
    )
    assert problems[1] == (
        "attribution[1].builtin: unknown built-in rule 'storm' (allowed: "
        "kafka_streams_eos_v2, kafka_streams_eos_v1, flink, spring)"
    )
    assert problems[2] == "attribution[2].pattern: a regular expression is required"
    assert problems[3].startswith("attribution[3]: must be 'builtins' or a mapping")
    assert problems[4].startswith("attribution[4].colour: unknown key")
    assert problems[5] == (
        "attribution[5].pattern: invalid regular expression '(?P<app_name>x)':"
        " group name 'app_name' may hold only letters and digits"
    )
    assert len(rules) == 0  # a builtin entry was named, so none is prepended


def test_python_named_groups_are_rewritten_for_java() -> None:
    assert java_pattern(r"^(?P<application>\w+)-(?P=application)$") == (
        r"^(?<application>\w+)-\k<application>$"
    )
    assert AttributionRule("r", r"^(?<application>a)(b)").group_index == 1
    assert AttributionRule("r", r"^(a)(?P<application>b)").group_index == 2
    assert AttributionRule("r", r"^ab").group_index == 0


def test_the_byte_budget_replaces_the_offset_count_and_the_old_key_says_so() -> None:
    assert GroupsConfig().consumable_check_max_bytes == 8 << 20
    config, problems = parse_groups({"consumable_check_max_bytes": 0}, PATH)
    assert (config.consumable_check_max_bytes, problems) == (0, [])
    _, problems = parse_groups({"consumable_check_max_offsets": 10}, PATH)
    assert problems == [
        f"{PATH}.consumable_check_max_offsets: replaced by consumable_check_max_bytes (bytes of "
        "batches read per cycle, not a number of offsets)"
    ]


def test_the_builtins_are_streams_and_flink_and_spring_needs_its_prefixes() -> None:
    assert [r.name for r in BUILTIN_RULES] == ["kafka_streams_eos_v2", "kafka_streams_eos_v1", "flink"]
    rules, problems = parse_attribution(
        ["builtins", {"builtin": "spring", "prefixes": ["tx-"], "application": "payments"}], "attribution"
    )
    assert problems == []
    assert rules == (*BUILTIN_RULES, spring_rule(["tx-"], "payments"))
    rules, problems = parse_attribution([{"builtin": "spring", "prefixes": "tx-"}], "attribution")
    assert (rules, problems) == ((spring_rule(["tx-"]),), [])
    _, problems = parse_attribution(
        [{"builtin": "spring"}, {"builtin": "spring", "prefixes": [""], "colour": 1}], "attribution"
    )
    assert problems == [
        "attribution[0].prefixes: the spring rule needs the transactionIdPrefix of each application "
        "(a list of non-empty strings): an id ending in digits alone does not tell Spring's",
        "attribution[1].colour: unknown key (allowed beside builtin spring: prefixes, application)",
        "attribution[1].prefixes: the spring rule needs the transactionIdPrefix of each application "
        "(a list of non-empty strings): an id ending in digits alone does not tell Spring's",
    ]
    _, problems = parse_attribution([{"builtin": "flink", "prefixes": ["x"]}], "attribution")
    assert problems == ["attribution[0].prefixes: not allowed beside builtin"]
