"""`glassformer explain constrained`: the tiny grammar's walk, in English and Chinese."""
from glassformer.cli import main


def test_walk_in_both_languages(capsys):
    assert main(["explain", "constrained", "--lang", "en"]) == 0
    english = capsys.readouterr().out
    assert "allowed (1 of 21): '{\"'" in english
    assert "refused '12': its byte 2 ('2') is not allowed after '{\"ok\":true,\"n\":11'" in english
    assert "<eos> allowed: the value is complete" in english
    assert english.rstrip().endswith("after it only <eos> was allowed.")
    assert main(["explain", "constrained", "--lang", "zh"]) == 0
    chinese = capsys.readouterr().out
    assert "受约束解码" in chinese and "允许 <eos>" in chinese
