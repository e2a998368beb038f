"""The command line's tables (paddlectl/cli/output.py): columns aligned by the width a terminal
gives each character, a cell's lines one under the other, nothing after a row's last cell, and
on a terminal no control character from the server reaching the screen."""

from __future__ import annotations

import pytest

from paddlectl.cli.output import emit, table, width

pytestmark = pytest.mark.unit


def test_columns_are_as_wide_as_their_widest_cell_plus_three_spaces():
    assert table(["NAME", "STATE"], [["fit", "Running"], ["a-longer-name", "-"]]).splitlines() == [
        "NAME            STATE",
        "fit             Running",
        "a-longer-name   -",
    ]


def test_wide_characters_take_two_columns_and_combining_marks_none():
    assert width("训练") == 4 and width("ｆｕｌｌ") == 8 and width("e\u0301") == 1
    lines = table(["NAME", "AGE"], [["训练", "3s"], ["e\u0301t\u00e9", "5s"], ["abcde", "1m"]]).splitlines()
    assert lines == ["NAME    AGE", "训练    3s", "e\u0301t\u00e9     5s", "abcde   1m"]
    assert len({width(line[:line.index(line.split()[-1])]) for line in lines}) == 1  # the second column aligned


def test_a_cell_of_several_lines_takes_as_many_rows_and_the_others_stay_in_column():
    assert table(["NAME", "MESSAGE", "AGE"], [["fit", "first\nsecond", "3s"], ["b", "x", "1s"]]).splitlines() == [
        "NAME   MESSAGE   AGE",
        "fit    first     3s",
        "       second",
        "b      x         1s",
    ]


def test_on_a_terminal_control_characters_are_shown_as_question_marks():
    hostile = "evil\x1b]0;owned\x07\x1b[2J.txt"
    assert table(["NAME"], [[hostile]], terminal=True).splitlines()[1] == "evil?]0;owned??[2J.txt"
    assert hostile in table(["NAME"], [[hostile]])  # a pipe gets the bytes as they are (-o json too)


def test_emit_prints_a_table_json_names_and_says_when_there_is_nothing(capsys):
    columns = [("NAME", lambda r: r["name"]), ("STATE", lambda r: r["state"])]
    jobs = [{"name": "fit", "state": "Running"}, {"name": "b", "state": None}]
    emit(jobs, "table", columns)
    assert capsys.readouterr().out == "NAME   STATE\nfit    Running\nb      -\n"
    emit(jobs, "name", columns)
    assert capsys.readouterr().out == "fit\nb\n"
    emit({"name": "训练"}, "json")
    assert capsys.readouterr().out == '{\n  "name": "训练"\n}\n'
    emit([], "table", columns)
    assert capsys.readouterr().err == "No resources found.\n"
