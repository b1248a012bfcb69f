"""Templating with the real Jinja2 sandbox; no stand-ins."""

from __future__ import annotations

import pytest

from engine.errors import TemplateError
from engine.templating import Scope, evaluate, render
from engine.yamlload import load_text


def scope(templated=None, data=None, override=None):
    return Scope(templated or {}, data or {}, override)


def test_single_expression_keeps_native_type():
    s = scope({"n": 8, "items": [1, 2], "flag": True})
    assert render("{{ n }}", s) == 8
    assert render("{{ items }}", s) == [1, 2]
    assert render("{{ flag }}", s) is True
    assert render("{{ n * 2 }}", s) == 16
    assert render("{{ '123' }}", s) == "123"


def test_mixed_text_is_a_string():
    assert render("tp={{ n }}", scope({"n": 8})) == "tp=8"


def test_undefined_variable_is_an_error_naming_it():
    with pytest.raises(TemplateError, match="'modle_dir'"):
        render("{{ modle_dir }}/config.json", scope({"model_dir": "/m"}))


def test_undefined_attribute_is_an_error():
    with pytest.raises(TemplateError, match="gpuz"):
        render("{{ facts.gpuz }}", scope(data={"facts": {"gpus": []}}))


def test_a_missing_attribute_of_a_playbook_mapping_is_named_as_ansible_names_it():
    """Variables from YAML are rigger's LocatedDict/LocatedList (they remember file:line);
    the message says 'dict object', as Ansible's does, never the class."""
    foo = load_text("bar_: 1\n", "vars.yml")
    items = load_text("[1]\n", "vars.yml")
    with pytest.raises(TemplateError) as err:
        render("{{ foo.bar }}", scope({"foo": foo}))
    assert "'dict object' has no attribute 'bar'" in str(err.value) and "Located" not in str(err.value)
    with pytest.raises(TemplateError) as err:
        render("{{ items[3] }}", scope({"items": items}))
    assert "list object has no element 3" in str(err.value) and "Located" not in str(err.value)


def test_user_variables_render_lazily_and_in_order():
    s = scope({"root": "/models", "dir": "{{ root }}/kimi", "cfg": "{{ dir }}/config.json"})
    assert render("{{ cfg }}", s) == "/models/kimi/config.json"


def test_self_reference_is_reported():
    with pytest.raises(TemplateError, match="refers to itself"):
        render("{{ a }}", scope({"a": "{{ a }}"}))


def test_host_data_is_never_rendered_again():
    s = scope(data={"out": {"stdout": "{{ lookup('pipe', 'id') }}"}})
    assert render("{{ out.stdout }}", s) == "{{ lookup('pipe', 'id') }}"
    assert render("got: {{ out.stdout }}", s) == "got: {{ lookup('pipe', 'id') }}"


def test_extra_vars_win_over_data_and_play_vars():
    s = scope({"x": "play"}, {"x": "registered"}, {"x": "extra"})
    assert render("{{ x }}", s) == "extra"


def test_sandbox_blocks_attribute_escapes():
    with pytest.raises(TemplateError):
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", scope())


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("{{ missing | default('d') }}", "d"),
        ("{{ '42' | int }}", 42),
        ("{{ 'yes' | bool }}", True),
        ("{{ 5 | string }}", "5"),
        ("{{ {'a': 1} | to_json }}", '{"a": 1}'),
        ("{{ '{\"a\": 1}' | from_json }}", {"a": 1}),
        ("{{ {'a': 1} | to_yaml }}", "{a: 1}\n"),  # ansible-core's answer: flow style
        ("{{ {'a': [1, 2]} | to_nice_yaml }}", "a:\n- 1\n- 2\n"),
        ("{{ 'vllm 0.16.0' | regex_search('[0-9.]+') }}", "0.16.0"),
        ("{{ 'a-b' | regex_replace('-', '_') }}", "a_b"),
        ("{{ '/m/k/config.json' | basename }}", "config.json"),
        ("{{ '/m/k/config.json' | dirname }}", "/m/k"),
        ("{{ ['a', 'b'] | join(',') }}", "a,b"),
        ("{{ gpus | selectattr('used', 'gt', 10) | map(attribute='i') | list }}", [1]),
    ],
)
def test_filters_ansible_users_expect(expr, expected):
    s = scope({"gpus": [{"i": 0, "used": 3}, {"i": 1, "used": 900}]})
    assert render(expr, s) == expected


def test_conditions_without_braces():
    s = scope(data={"r": {"changed": True, "rc": 0}})
    assert evaluate("r.rc == 0 and r is changed", s) is True
    assert evaluate("r is failed", s) is False


def test_attribute_of_undefined_is_undefined_not_an_error():
    """As Ansible (case filters-tests): 'x.y is defined' with x undefined is false."""
    s = scope({"base": {"a": 1}})
    assert render("{{ nothing.here is defined }}", s) is False
    assert render("{{ nothing.here.deeper | default('d') }}", s) == "d"
    assert render("{{ base.missing is undefined }}", s) is True


def test_backslashes_in_expression_literals_are_kept():
    """As Ansible: regex_replace('(\\w+) (\\w+)', '\\2 \\1') swaps words (case filters-tests)."""
    assert render("{{ 'Hello World' | regex_replace('(\\w+) (\\w+)', '\\2 \\1') }}", scope({})) == "World Hello"


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        ({"path": "/x", "mode": "{{ m | default(omit) }}"}, {"path": "/x"}),
        ({"path": "/x", "mode": "{{ 'a' | ternary(omit, '0600') }}"}, {"path": "/x"}),
        ({"path": "/x", "mode": "{{ omit if c else '0600' }}"}, {"path": "/x"}),
        ({"path": "/x", "mode": "{{ omit if not c else '0600' }}"}, {"path": "/x", "mode": "0600"}),
        ({"opts": ["a", "{{ omit }}", "b"], "env": {"K": "{{ omit }}", "L": 1}}, {"opts": ["a", "b"], "env": {"L": 1}}),
    ],
)
def test_an_argument_that_renders_to_omit_is_dropped(args, kept):
    """``omit`` is a variable wherever a template reads it (as in Ansible); an argument, list
    item or mapping entry whose value renders to it is left out of the module's arguments."""
    from engine.templating.omit import without_omitted

    assert without_omitted(render(args, scope({"c": True}))) == kept


def test_omit_is_defined_at_validate_and_drops_the_argument_at_run_time(tmp_path, rigger):
    """Real: the rigger CLI runs the file module on this machine's local connection."""
    target = tmp_path / "made"
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - file: {{path: {target}, state: touch, mode: \"{{{{ 'x' | ternary(omit, '0600') }}}}\"}}\n"
        f"    - file: {{path: {target}, owner: \"{{{{ omit if true else 'nobody' }}}}\"}}\n"
    )
    assert rigger("validate", str(book)).rc == 0
    run = rigger("run", str(book), "-e", "rigger_run_lock=false")
    assert run.rc == 0, run.stderr
    assert target.exists() and target.stat().st_mode & 0o777 != 0o600 and target.owner() == "root"
