"""The flat public API: every name in ``tfopt.__all__`` resolves, and cheaply where it should."""

from __future__ import annotations

import subprocess
import sys

import tfopt


def test_every_public_name_resolves_to_an_object_of_that_name():
    for name in tfopt.__all__:
        value = getattr(tfopt, name)
        assert value is not None, name
        if name != "__version__" and hasattr(value, "__name__"):
            assert value.__name__ == name, (name, value)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    try:
        tfopt.no_such_thing  # noqa: B018
    except AttributeError as error:
        assert "no_such_thing" in str(error)
    else:
        raise AssertionError("tfopt.no_such_thing resolved")


def test_import_tfopt_imports_no_tensorflow():
    code = "import sys, tfopt; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_analyze_is_the_function_even_after_its_package_is_imported():
    # the package is tfopt.analysis: a tfopt/analyze/ package would shadow the function
    import tfopt.analysis.report  # noqa: F401

    assert callable(tfopt.analyze) and tfopt.analyze.__name__ == "analyze"
    assert tfopt.analyze.__module__ == "tfopt.analysis.analyze"


def test_the_public_api_is_small_enough_to_hold_in_your_head():
    # everything else is imported from the module that defines it
    assert len(tfopt.__all__) <= 25, tfopt.__all__
    assert len(set(tfopt.__all__)) == len(tfopt.__all__)


def test_every_public_name_has_a_docstring_whose_first_line_says_what_it_does():
    for name in tfopt.__all__:
        if name == "__version__":
            continue  # a str
        value = getattr(tfopt, name)
        doc = value.__doc__ or ""
        first = doc.strip().split("\n", 1)[0].strip()
        summary = " ".join(doc.strip().split("\n\n", 1)[0].split())  # may wrap over lines
        # a dataclass without a docstring gets its signature, "Name(field: type, ...)"
        assert first and not first.startswith(f"{name}("), (name, doc)
        assert len(first.split()) >= 4 and summary.endswith("."), (name, summary)
