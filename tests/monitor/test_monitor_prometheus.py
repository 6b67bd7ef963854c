"""The exporter against a real Prometheus server, the rules against promtool, real loopback traffic.

Prometheus and promtool come from the Debian ``prometheus`` package.  When they
are missing these tests skip, unless ``FABRICSCOPE_REQUIRE_PROMETHEUS`` is set
(CI sets it), in which case they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from monitor_helpers import SEQUENCE, LoopbackTraffic

from fabricscope.launch import free_port
from fabricscope.monitor.rules import AlertThresholds, alert_rules
from helpers import cli_env, run_cli


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("FABRICSCOPE_REQUIRE_PROMETHEUS"):
            pytest.fail(f"{binary} is not installed and FABRICSCOPE_REQUIRE_PROMETHEUS is set")
        pytest.skip(
            f"{binary} is not installed (Debian package prometheus); set FABRICSCOPE_REQUIRE_PROMETHEUS to fail"
        )
    return path


def get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def scrape_value(text: str, name: str, labels: str = "") -> float | None:
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.split()[-1])
    return None


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 20 s; its pipes drained and closed."""
    proc.terminate()
    try:
        proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


@pytest.fixture
def exporter(request: pytest.FixtureRequest) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """A real ``fabricscope monitor --serve`` process on a free 127.0.0.1 port."""
    port = free_port()
    args = getattr(request, "param", [])
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.2", "--serve", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        wait_for(lambda: _up(port), 30, "the exporter to answer")
        yield port, proc
    finally:
        stop(proc)


def _up(port: int) -> bool:
    try:
        return "fabricscope_monitor_last_sample_timestamp_seconds" in get(f"http://127.0.0.1:{port}/metrics", 2)
    except OSError:
        return False


LOOPBACK = [["--interfaces", "lo"]]
"""The exporter's arguments for tests that make traffic on lo (left out unless named)."""


@pytest.mark.parametrize("exporter", LOOPBACK, indirect=True)
def test_rising_loopback_byte_rate_shows_in_the_exporter(exporter: tuple[int, subprocess.Popen[str]]) -> None:
    port, _ = exporter
    url = f"http://127.0.0.1:{port}/metrics"
    text = get(url)
    before = scrape_value(text, "fabricscope_net_receive_bytes_total", '{device="lo"}')
    assert before is not None, text
    assert "# TYPE fabricscope_net_receive_bytes_total counter" in text
    with LoopbackTraffic() as traffic:
        receive = "fabricscope_net_receive_bytes_per_second"
        rate = wait_for(
            lambda: (v := scrape_value(get(url), receive, '{device="lo"}')) and v > 0,
            30,
            "a loopback receive rate",
        )
        wait_for(lambda: traffic.sent > 20 << 20, 30, "20 MiB sent")
        time.sleep(0.5)  # two more samples
        after = scrape_value(get(url), "fabricscope_net_receive_bytes_total", '{device="lo"}')
    assert rate
    assert after is not None and after - before >= 20 << 20


def metric_types(text: str) -> dict[str, str]:
    """``# TYPE name kind`` lines of an exposition, as {name: kind}."""
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_promtool_check_metrics_finds_nothing_to_say(exporter: tuple[int, subprocess.Popen[str]]) -> None:
    """Issue 24: promtool's lint of a live scrape is silent (rates in bytes per second: Prometheus' base
    unit is the byte; it flagged ``_bits_per_second``)."""
    promtool = need("promtool")
    port, _ = exporter
    url = f"http://127.0.0.1:{port}/metrics"
    text = wait_for(lambda: t if "_bytes_per_second" in (t := get(url)) else None, 30, "a rate in the scrape")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)


def test_names_follow_the_conventions_and_do_not_clash_with_node_exporter(
    exporter: tuple[int, subprocess.Popen[str]],
) -> None:
    port, _ = exporter
    ours = metric_types(get(f"http://127.0.0.1:{port}/metrics"))
    assert ours and all(name.startswith("fabricscope_") for name in ours)
    for name, kind in ours.items():
        if kind == "counter":
            assert name.endswith("_total"), name
        else:
            assert name.endswith(("_ratio", "_seconds", "_up", "_bytes_per_second")), name
    node_exporter = need("prometheus-node-exporter")
    node_port = free_port()
    proc = subprocess.Popen(
        [node_exporter, f"--web.listen-address=127.0.0.1:{node_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        theirs = metric_types(wait_for(lambda: _text_or_none(f"http://127.0.0.1:{node_port}/metrics"), 30, "node"))
    finally:
        proc.terminate()
        proc.wait(15)
    assert "node_network_receive_bytes_total" in theirs  # the same facts, under node_exporter's own names
    assert not set(ours) & set(theirs)


def _text_or_none(url: str) -> str | None:
    try:
        return get(url)
    except OSError:
        return None


@pytest.mark.parametrize("exporter", [["--root", str(SEQUENCE / "t1")]], indirect=True)
def test_rdma_metrics_from_a_fixture_tree(exporter: tuple[int, subprocess.Popen[str]]) -> None:
    port, _ = exporter
    text = get(f"http://127.0.0.1:{port}/metrics")
    labels = '{device="mlx5_0",port="1"}'
    assert scrape_value(text, "fabricscope_rdma_transmit_bytes_total", labels) == 5_249_000_000 * 4
    assert scrape_value(text, "fabricscope_rdma_port_up", labels) == 1.0
    assert scrape_value(text, "fabricscope_rdma_link_speed_bytes_per_second", labels) == 200e9 / 8
    errors = '{counter="symbol_error",device="mlx5_0",port="1"}'
    assert scrape_value(text, "fabricscope_rdma_port_errors_total", errors) == 5.0
    pause = '{device="ens1f0np0",stat="rx_prio3_pause"}'
    assert scrape_value(text, "fabricscope_net_ethtool_stat_total", pause) == 50.0
    assert scrape_value(text, "fabricscope_tcp_retransmitted_segments_total") == 1250.0


@pytest.mark.parametrize("exporter", LOOPBACK, indirect=True)
def test_a_real_prometheus_scrapes_the_exporter(exporter: tuple[int, subprocess.Popen[str]], tmp_path: Path) -> None:
    prometheus = need("prometheus")
    port, _ = exporter
    web = free_port()
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules())
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n  - job_name: fabricscope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n"
    )
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    api = f"http://127.0.0.1:{web}/api/v1"
    try:

        def target_up() -> bool:
            try:
                targets = json.loads(get(f"{api}/targets"))["data"]["activeTargets"]
            except OSError:
                return False
            return any(t["health"] == "up" for t in targets)

        wait_for(target_up, 60, "Prometheus to scrape the exporter")
        with LoopbackTraffic():
            query = urllib.parse.quote('fabricscope_net_receive_bytes_total{device="lo"}')

            def value() -> float | None:
                result = json.loads(get(f"{api}/query?query={query}"))["data"]["result"]
                return float(result[0]["value"][1]) if result else None

            first = wait_for(value, 30, "the lo byte counter in Prometheus")
            rising = wait_for(lambda: (v := value()) is not None and v > first, 30, "the counter to rise")
        assert rising
        rules_loaded = json.loads(get(f"{api}/rules"))["data"]["groups"]
        assert {r["name"] for g in rules_loaded for r in g["rules"]} >= {
            "FabricscopeTcpRetransmissionsHigh",
            "FabricscopeLinkSaturated",
        }
    finally:
        stop(server)


@pytest.mark.parametrize(
    "thresholds",
    [AlertThresholds(), AlertThresholds(retrans_ratio=2e-4, utilization=0.75, for_s=600, window_s=90.5)],
)
def test_promtool_accepts_the_rules(thresholds: AlertThresholds, tmp_path: Path) -> None:
    promtool = need("promtool")
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules(thresholds))
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_promtool_unit_tests_the_retransmission_and_rdma_rules(tmp_path: Path) -> None:
    """The rules fire on the series they are meant for (promtool's rule unit tests, real evaluation)."""
    promtool = need("promtool")
    (tmp_path / "rules.yml").write_text(alert_rules())
    (tmp_path / "tests.yml").write_text(
        "rule_files: [rules.yml]\n"
        "evaluation_interval: 1m\n"
        "tests:\n"
        "  - interval: 1m\n"
        "    input_series:\n"
        "      - series: 'fabricscope_tcp_sent_segments_total{instance=\"n1\"}'\n"
        "        values: '0+10000x10'\n"
        "      - series: 'fabricscope_tcp_retransmitted_segments_total{instance=\"n1\"}'\n"
        "        values: '0+50x10'\n"
        '      - series: \'fabricscope_rdma_port_errors_total{instance="n1",device="mlx5_0",port="1",'
        'counter="symbol_error"}\'\n'
        "        values: '0 0 0 0 0 3 3 3 3 3 3'\n"
        "    alert_rule_test:\n"
        "      - eval_time: 8m\n"
        "        alertname: FabricscopeTcpRetransmissionsHigh\n"
        "        exp_alerts:\n"
        "          - exp_labels: {severity: warning, instance: n1}\n"
        "            exp_annotations:\n"
        "              summary: 'TCP retransmission ratio above 0.001 on n1'\n"
        "              description: '0.5% of TCP segments were retransmitted over the last 5m.'\n"
        "      - eval_time: 6m\n"
        "        alertname: FabricscopeRdmaPortErrors\n"
        "        exp_alerts:\n"
        "          - exp_labels: {severity: critical, instance: n1, device: mlx5_0, port: '1', counter: symbol_error}\n"
        "            exp_annotations:\n"
        "              summary: 'RDMA symbol_error rising on mlx5_0/1'\n"
        "              description: 'symbol_error grew by 3 over the last 5m on n1.'\n"
        "      - eval_time: 3m\n"
        "        alertname: FabricscopeRdmaPortErrors\n"
        "        exp_alerts: []\n"
        "  - interval: 1m\n"  # 0.05% retransmitted: under the threshold, no alert
        "    input_series:\n"
        "      - series: 'fabricscope_tcp_sent_segments_total{instance=\"n2\"}'\n"
        "        values: '0+10000x10'\n"
        "      - series: 'fabricscope_tcp_retransmitted_segments_total{instance=\"n2\"}'\n"
        "        values: '0+5x10'\n"
        "    alert_rule_test:\n"
        "      - eval_time: 8m\n"
        "        alertname: FabricscopeTcpRetransmissionsHigh\n"
        "        exp_alerts: []\n"
        # A NIC sending 95 MB/s on a 100 MB/s link (the byte counter's rate, not a gauge), dropping 4 packets.
        "  - interval: 1m\n"
        "    input_series:\n"
        '      - series: \'fabricscope_net_transmit_bytes_total{instance="n3",device="eth0"}\'\n'
        "        values: '0+5700000000x14'\n"
        '      - series: \'fabricscope_net_receive_bytes_total{instance="n3",device="eth0"}\'\n'
        "        values: '0+60000000x14'\n"
        '      - series: \'fabricscope_net_link_speed_bytes_per_second{instance="n3",device="eth0"}\'\n'
        "        values: '100000000x14'\n"
        '      - series: \'fabricscope_net_transmit_drops_total{instance="n3",device="eth0"}\'\n'
        "        values: '0 0 0 4 4 4 4 4 4 4 4 4 4 4 4'\n"
        "    alert_rule_test:\n"
        "      - eval_time: 14m\n"
        "        alertname: FabricscopeLinkSaturated\n"
        "        exp_alerts:\n"
        "          - exp_labels: {severity: info, instance: n3, device: eth0}\n"
        "            exp_annotations:\n"
        "              summary: 'eth0 above 90% of line rate for 5m'\n"
        "              description: 'eth0 on n3 runs at 95% of its line rate: jobs on this node may be "
        "network-bound.'\n"
        "      - eval_time: 5m\n"
        "        alertname: FabricscopeNicErrors\n"
        "        exp_alerts:\n"
        "          - exp_labels: {severity: warning, instance: n3, device: eth0}\n"
        "            exp_annotations:\n"
        "              summary: 'Errors or drops on eth0'\n"
        "              description: 'eth0 on n3 counted 4 errors or drops over 5m.'\n"
    )
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_textfile_output_is_read_by_a_real_node_exporter(tmp_path: Path) -> None:
    """Issue 24: ``--textfile DIR`` keeps DIR/fabricscope.prom, written whole every interval, which a real
    node_exporter's textfile collector serves beside its own series (no second daemon, no second port)."""
    node_exporter = need("prometheus-node-exporter")
    promtool = need("promtool")
    folder = tmp_path / "textfile"
    folder.mkdir()
    monitor = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.2", "--interfaces", "lo",
         "--no-gpu", "--textfile", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )  # fmt: skip
    node_port = free_port()
    node = subprocess.Popen(
        [node_exporter, f"--web.listen-address=127.0.0.1:{node_port}",
         f"--collector.textfile.directory={folder}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        written = folder / "fabricscope.prom"
        wait_for(lambda: written.exists() and "_bytes_per_second" in written.read_text(), 30, "the textfile")
        text = written.read_text()
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == "" and done.stderr == "", (done.stdout, done.stderr)
        url = f"http://127.0.0.1:{node_port}/metrics"
        served = wait_for(lambda: t if "fabricscope_net_receive_bytes_total" in (t := _scrape(url)) else None, 30,
                          "node_exporter to serve the textfile")  # fmt: skip
        assert scrape_value(served, "fabricscope_net_receive_bytes_total", '{device="lo"}') is not None
        assert "node_textfile_scrape_error 0" in served
        stop(monitor)  # a running monitor has its next file half written beside the served one
        assert sorted(p.name for p in folder.iterdir()) == ["fabricscope.prom"]  # no temporary file left
    finally:
        if monitor.poll() is None:
            stop(monitor)
        stop(node)


def _scrape(url: str) -> str:
    try:
        return get(url)
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("name", "message"),
    [("nope", "is not a folder"), ("fifo", "exists and is not a folder"), ("zero", "exists and is not a folder"),
     ("a" * 5000, "name too long"), ("", "needs a folder name"), ("busy", "is a FIFO"),
     ("nested", "is a folder, where node_exporter's textfile collector"),
     ("in", "--json and --textfile name the same file")],
)  # fmt: skip
def test_textfile_needs_a_folder_it_can_write_in(tmp_path: Path, name: str, message: str) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "nested" / "fabricscope.prom").mkdir(parents=True)
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "busy").mkdir()
    os.mkfifo(tmp_path / "busy" / "fabricscope.prom")  # the file it would write: a FIFO
    (tmp_path / "in").mkdir()
    args = ["monitor", "--textfile", str(tmp_path / name) if name else "", "--duration", "1"]
    if name == "in":  # --json names the very file --textfile writes (on a first run, before it exists)
        args += ["--json", str(tmp_path / "in" / "fabricscope.prom")]
    done = run_cli(args, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: --") and message in done.stderr, done.stderr
    assert "--textfile" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("exporter", [["--root", str(SEQUENCE / "t1"), "--no-gpu"]], indirect=True)
def test_every_recording_rule_and_dashboard_query_returns_series_from_a_real_prometheus(
    exporter: tuple[int, subprocess.Popen[str]], tmp_path: Path
) -> None:
    """Issue 24: the recording rules pass promtool, and a real Prometheus scraping a real exporter (an
    RoCE node's captured tree: NICs, an RDMA port with its line rate, TCP) evaluates every one of them and
    every query of the Grafana dashboard to a non-empty result."""
    from fabricscope.monitor.dashboard import grafana_dashboard
    from fabricscope.monitor.rules import RECORDING_RULES, recording_rules

    prometheus, promtool = need("prometheus"), need("promtool")
    port, _ = exporter
    recording, alerting = tmp_path / "recording.yml", tmp_path / "alerts.yml"
    recording.write_text(recording_rules())
    alerting.write_text(alert_rules())
    done = subprocess.run([promtool, "check", "rules", str(recording), str(alerting)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and f"SUCCESS: {len(RECORDING_RULES)} rules found" in done.stdout, done.stdout
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {recording}\n  - {alerting}\n"
        "scrape_configs:\n  - job_name: fabricscope\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n"
    )
    server = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    api = f"http://127.0.0.1:{web}/api/v1"

    def series(expr: str) -> list[object] | None:
        try:
            found = json.loads(get(f"{api}/query?query={urllib.parse.quote(expr)}"))["data"]["result"]
        except OSError:
            return None
        return list(found) or None

    try:
        for name, _ in RECORDING_RULES:
            wait_for(lambda name=name: series(name), 90, f"the recording rule {name}")
        targets = [
            t["expr"].replace("$instance", ".*")
            for panel in grafana_dashboard()["panels"]
            for t in panel.get("targets", [])
        ]
        assert len(targets) >= 10
        empty = [expr for expr in targets if not series(expr)]
        assert empty == [], empty
    finally:
        stop(server)


def test_the_dashboard_plots_only_recorded_series_and_lists_the_alerts() -> None:
    from fabricscope.monitor.dashboard import grafana_dashboard
    from fabricscope.monitor.rules import RECORDING_RULES

    dashboard = grafana_dashboard()
    recorded = {name for name, _ in RECORDING_RULES}
    plotted = {t["expr"].split("{")[0] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert plotted == recorded  # every recorded series is on a panel, and no panel plots anything else
    assert [p["type"] for p in dashboard["panels"]].count("alertlist") == 1
    assert json.loads(run_cli(["monitor", "--grafana-dashboard"]).stdout) == dashboard


def test_a_textfile_that_stops_fitting_is_said_once_and_the_watching_goes_on(tmp_path: Path) -> None:
    """A full disk under --textfile ends neither the watching nor the job: said once; without a command the
    exit is 1 (the monitor's own output failed), with one it is the command's."""
    from helpers import small_tmpfs

    with small_tmpfs(tmp_path / "tiny", "4k") as folder:
        (folder / "fill").write_bytes(bytes(3000))
        alone = run_cli(["monitor", "--interval", "0.2", "--duration", "1.5", "--no-gpu", "--textfile", str(folder)])
        assert alone.returncode == 1, alone.stderr
        said = [line for line in alone.stderr.splitlines() if "No space left on device" in line]
        assert len(said) == 2 and "--textfile stops here, the watching goes on" in said[0], alone.stderr
        assert (
            said[1]
            == f"error: --textfile stopped early: cannot write {folder}/fabricscope.prom: No space left on device"
        )
        job = run_cli(["monitor", "--interval", "0.2", "--no-gpu", "--textfile", str(folder), "--",
                       sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(3)"])  # fmt: skip
        assert job.returncode == 3, job.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["fill"]  # no torn or temporary file left
