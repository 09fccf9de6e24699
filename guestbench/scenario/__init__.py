"""Scenario files: the model (model.py), the checks of every value (checker.py), reading, expanding and the
command line's overrides (load.py), and the caps on what a file may ask for (limits.py). Every problem is a
UserError naming the file, the key path, what is wrong and what is allowed."""

from guestbench.scenario.checker import Checker
from guestbench.scenario.load import apply_overrides, help_text, load_scenario, parse_scenario
from guestbench.scenario.model import (DEFAULT_SAMPLE_TIMEOUT_S, DEFAULT_TIMEOUT_S, ENV_NAME, SIDE, SIDES,
                                       MeasurementSpec, NestedSpec, Scenario)

__all__ = ["Checker", "apply_overrides", "help_text", "load_scenario", "parse_scenario", "DEFAULT_SAMPLE_TIMEOUT_S",
           "DEFAULT_TIMEOUT_S", "ENV_NAME", "SIDE", "SIDES", "MeasurementSpec", "NestedSpec", "Scenario"]
