"""The package as an editor and a new user see it: type stubs that match the module, docstrings,
the examples' files."""

import inspect
from pathlib import Path

import fl
import fl.flower
import fl.simulation

HERE = Path(__file__).resolve().parent


def test_the_committed_stubs_are_the_built_modules():
    built = Path(fl._fl.__file__).with_name("_fl.pyi")
    committed = HERE.parent / "fl" / "_fl.pyi"
    assert built.exists(), "the build generates fl/_fl.pyi next to the module"
    assert committed.read_text() == built.read_text(), (
        f"python/fl/_fl.pyi is stale: cp {built} {committed}")
    assert (HERE.parent / "fl" / "py.typed").exists()


def test_the_public_api_is_documented():
    for obj in (fl, fl.Client, fl.Client.run, fl.Client.stop, fl.FlError, fl.empty_weights,
                fl.copy_weights, fl.save_safetensors, fl.load_safetensors, fl.flower.adapt,
                fl.flower.initial_weights, fl.simulation.run, fl.simulation.partition):
        assert inspect.getdoc(obj), f"{obj} has no docstring"
