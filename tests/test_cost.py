"""The cost table (issue 16): core-seconds and GiB-seconds per sample, and money with the scenario's prices."""

from __future__ import annotations

from typing import Any

import pytest

from guestbench.scenario.prices import Prices
from guestbench.output.tables import cost as cost_table
from guestbench.util.errors import UserError
from guestbench.output import results_doc
from guestbench.output.render import markdown
from guestbench.output.export.json import to_summary_json
from guestbench.analysis.findings import analyze
from guestbench.scenario import parse_scenario
from helpers.results import run_of


def _doc(prices: dict | None) -> dict:
    def sample(cpu: float, pss: float, wall: float) -> dict:
        return {"rep": 1, "seconds": wall, "resources": {"cpu_s": cpu, "peak_pss_mib": pss, "peak_rss_mib": pss + 50}}
    return {"scenario": {"name": "c", **({"cost": prices} if prices else {})}, "cells": [
        {"backend": "uml", "placement": "host", "measurement": "startup", "label": "startup",
         "samples": [sample(4.0, 512, 5.0), sample(6.0, 512, 5.0), sample(5.0, 512, 5.0)]},
        {"backend": "tcg", "placement": "host", "measurement": "upload", "label": "upload", "bytes": 500_000_000,
         "samples": [sample(2.0, 1024, 4.0)]},
        {"backend": "tcg", "placement": "host", "measurement": "startup", "label": "old", "samples": [
            {"rep": 1, "seconds": 3.0}]},  # written before samples recorded their resources: no row
    ]}


def test_without_prices_the_table_is_core_and_gib_seconds() -> None:
    rows = analyze(run_of(_doc(None))).cost
    assert [(r.backend, r.label, r.per, r.n) for r in rows] == [("uml", "startup", "launch", 3),
                                                                ("tcg", "upload", "sample", 1)]
    assert (rows[0].core_s.median, rows[0].core_s.low, rows[0].core_s.high) == (5.0, 4.0, 6.0)
    assert rows[0].gib_s.median == pytest.approx(0.5 * 5.0)  # 512 MiB held for 5 s
    assert rows[0].per_1000 is None and "No prices given" in cost_table.caption(rows, None)


def test_unit_prices_give_cost_per_1000_launches_and_per_gb() -> None:
    prices = {"vcpu_hour": 0.036, "gib_hour": 0.0072, "currency": "USD"}
    found = analyze(run_of(_doc(prices)))
    p = found.prices
    assert p is not None
    uml, tcg = found.cost
    # a launch: 5 core-s at 0.036/h plus 2.5 GiB-s at 0.0072/h
    assert uml.per_1000 is not None and uml.per_1000.median == pytest.approx(1000 * (5 * 0.036 + 2.5 * 0.0072) / 3600)
    # 500 MB: 2 core-s + 4 GiB-s, per 10^9 bytes
    assert tcg.per_gb is not None and tcg.per_gb.median == pytest.approx((2 * 0.036 + 4 * 0.0072) / 3600 / 0.5)
    md = to_markdown(_doc(prices))
    assert "## what it costs" in md and "USD per 1,000" in md and "0.036 USD per vCPU-hour" in md
    row = to_summary_json(analyze(run_of(_doc(prices))))["cost"]["rows"][0]
    assert row["per_1000"]["median"] == pytest.approx(uml.per_1000.median)


def test_an_instance_is_paid_for_by_the_resource_that_runs_out_first() -> None:
    p = Prices(instance_hour=0.36, vcpus=2, memory_mib=2048, currency="EUR")
    assert p.per_sample(core_s=10.0, gib_s=1.0) == pytest.approx(0.36 / 3600 * 5.0)  # CPU binds: 10/2 > 1/2
    assert p.per_sample(core_s=1.0, gib_s=10.0) == pytest.approx(0.36 / 3600 * 5.0)  # memory binds: 10/2 > 1/2
    assert "2 vCPUs and 2 GiB" in p.describe()


@pytest.mark.parametrize("given, problem", [
    ({"vcpu_hour": 0.04}, "is not a complete set of prices"),
    ({"vcpu_hour": 0.04, "gib_hour": 0.01, "vcpus": 2}, "is not a complete set of prices"),
    ({"vcpu_hour": -1, "gib_hour": 0.01}, "cost.vcpu_hour: -1 is not a price"),
    ({"dollars": 3}, "cost.dollars: unknown key"),
    ("cheap", "is not a mapping"),
])
def test_bad_prices_are_one_line(given: object, problem: str) -> None:
    with pytest.raises(UserError) as e:
        parse_scenario({"name": "c", "measurements": ["startup"], "cost": given}, "s.yaml")
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_prices_survive_the_file_handed_to_the_level1_guest() -> None:
    sc = parse_scenario({"name": "c", "measurements": ["startup"],
                         "cost": {"instance_hour": 0.19, "vcpus": 4, "memory": "16GiB", "currency": "USD"}}, "s.yaml")
    assert parse_scenario(sc.to_file(), "inside.yaml").cost == sc.cost


def to_markdown(doc: dict[str, Any]) -> str:
    return markdown.to_markdown(results_doc.show_document(run_of(doc)))
