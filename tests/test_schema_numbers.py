"""cassini.schema.number and integer: the one reader of numbers in configs and requests
(the testbed's configs included), each error naming its field."""

from __future__ import annotations

import numpy as np
import pytest

from cassini import schema
from cassini.errors import InputError
from cassini.sim.config import config_from_dict

SIM_CONFIG = {
    "cluster": {"racks": 2, "servers_per_rack": 2, "gpus_per_server": 4},
    "workload": {
        "poisson": {"jobs": 4, "load": 0.5, "gpus": {4: 1}, "iterations": [20, 30],
                    "models": ["bert"]}
    },
    "schedulers": ["themis"],
}


@pytest.mark.parametrize(
    ("value", "bounds", "problem"),
    [
        ("2e8", {}, "got the string '2e8' (YAML reads 2e8 as a string: write 2.0e+08 or "
                    "200000000, unquoted)"),
        ("0.5", {}, "a quoted number is a string: write it without quotes"),
        ("fast", {}, "must be a number, got the string 'fast'"),
        (True, {}, "must be a number, got a boolean"),
        (10**400, {}, "must be finite, got an integer too large for a float"),
        (float("nan"), {}, "must be finite, got nan"),
        (-1.0, {"non_negative": True}, "must be >= 0, got -1"),
        (0.0, {"positive": True}, "must be > 0, got 0"),
        (0.5, {"minimum": 1.0}, "must be >= 1, got 0.5"),
        (2.0, {"above": 2.0}, "must be > 2, got 2"),
        (3.0, {"below": 3.0}, "must be < 3, got 3"),
        (0.0, {"minimum": 0.0, "positive": True}, "must be > 0, got 0"),  # the stricter
        # %g read as the bound itself: "must be >= 1, got 1" for 0.9999999
        (0.9999999, {"minimum": 1.0}, "must be >= 1, got 0.9999999"),
        (3.0000001, {"below": 3.0}, "must be < 3, got 3.0000001"),
    ],
)  # fmt: skip
def test_number_names_the_field_and_what_is_wrong(value, bounds, problem) -> None:
    with pytest.raises(InputError, match="^f: ") as e:
        schema.number(value, "f", **bounds)
    assert problem in str(e.value)


def test_number_accepts_numpys_numbers_and_returns_floats() -> None:
    assert schema.number(np.float32(1.5), "f", positive=True) == 1.5
    assert schema.number(np.int64(3), "f", minimum=3) == 3.0
    assert type(schema.number(7, "f")) is float


@pytest.mark.parametrize(
    ("value", "bounds", "problem"),
    [
        ("3", {}, "must be an integer, got the string '3' (a quoted number"),
        ("1e6", {}, "(YAML reads 1e6 as a string: write 1.0e+06 or 1000000, unquoted)"),
        (2.5, {}, "must be an integer, got 2.5"),
        (float("inf"), {}, "must be an integer, got inf"),
        (2, {"minimum": 3}, "must be >= 3, got 2"),
        (10**70, {"maximum": 10}, "must be <= 10, got 10000000000"),
    ],
)
def test_integer_names_the_field_and_what_is_wrong(value, bounds, problem) -> None:
    with pytest.raises(InputError, match="^f: ") as e:
        schema.integer(value, "f", **bounds)
    assert problem in str(e.value)


def test_integer_takes_whole_floats_and_numpys_integers() -> None:
    assert schema.integer(4.0, "f") == 4
    assert schema.integer(np.int32(5), "f", minimum=5, maximum=5) == 5


def test_a_simulator_config_gets_the_yaml_hint_too() -> None:
    """A sim config's ``migration_s: 3e1`` (YAML 1.1: a string) says how to write it."""
    with pytest.raises(InputError, match=r"defrag\.migration_s: .*write 3\.0e\+01 or 30"):
        config_from_dict({**SIM_CONFIG, "defrag": {"migration_s": "3e1"}})


def test_an_integer_too_long_to_write_is_still_an_input_error() -> None:
    """Over the interpreter's 4,300 digits ``str`` refuses: the maximum's message said so
    with a ValueError, not the field's InputError."""
    with pytest.raises(InputError, match="^f: must be <= 5, got .*too long to write"):
        schema.integer(10**5000, "f", maximum=5)
