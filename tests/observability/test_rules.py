"""The shipped alert rules: valid for promtool, every alert covered by a promtool unit test, and the generated
files (dashboards, rules, chart copies) equal to what their Python source generates."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from governor.core.signals import LatencyKind
from governor.observability import alerts, generate

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / generate.RULES_FILE
PROMTOOL_TESTS = Path(__file__).with_name("rules_test.yaml")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_rules_file() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(PROMTOOL_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_case_in_the_unit_tests() -> None:
    shipped = {rule["alert"] for group in alerts.rule_groups() for rule in group["rules"] if "alert" in rule}
    cases = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert shipped == firing


def test_alerts_that_scale_carry_the_object_labels() -> None:
    """The webhook can only scale what an alert names: namespace and inferenceservice survive aggregation."""
    for group in alerts.rule_groups():
        for rule in group["rules"]:
            if alerts.SCALE_LABEL in rule.get("labels", {}):
                assert "by (namespace, inferenceservice" in rule["expr"], rule["alert"]


@pytest.mark.parametrize(
    "settings",
    [
        alerts.AlertSettings(slo_latency="ttft", slo_threshold_seconds="0.5", slo_objective="0.995"),
        alerts.AlertSettings(slo_latency="e2e", slo_threshold_seconds="2.0", queue_time_p95_seconds="0.5"),
    ],
)
def test_other_slo_settings_render_valid_rules(settings: alerts.AlertSettings, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(alerts.rules_file(settings))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    kind = LatencyKind(settings.slo_latency)
    assert f'{kind.histogram}_bucket{{le="{settings.slo_threshold_seconds}"}}' in path.read_text()


def test_a_threshold_between_buckets_is_refused() -> None:
    with pytest.raises(ValueError, match="not a bucket boundary"):
        alerts.rules_file(alerts.AlertSettings(slo_latency="tpot", slo_threshold_seconds="0.042"))


def test_generated_files_match_their_source() -> None:
    files = generate.generated_files(ROOT)
    assert generate.stale_files(ROOT, files) == [], "run `python -m governor.observability generate`"


def test_drift_is_detected(tmp_path: Path) -> None:
    """A hand edit to a chart copy, or a CRD missing from the chart, is reported."""
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "example.yaml").write_text("kind: CustomResourceDefinition\n")
    files = generate.generated_files(tmp_path)
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert generate.stale_files(tmp_path, files) == []
    (tmp_path / generate.CHART / "dashboards" / "vllm-governor.json").write_text("{}\n")
    (tmp_path / "crds" / "example.yaml").write_text("kind: CustomResourceDefinition  # changed\n")
    assert set(generate.stale_files(tmp_path, generate.generated_files(tmp_path))) == {
        generate.CHART / "dashboards" / "vllm-governor.json",
        generate.CHART / "crds" / "example.yaml",
    }
