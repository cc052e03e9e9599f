"""bench/tang_quatrains_eval.py's judge: what counts as a well-formed quatrain, and what the prompt
asks for."""
import pytest

from bench.tang_quatrains_eval import asked_form, is_quatrain

FIVE = "四時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。"
SEVEN = "憶昔嬌妃在紫宸，鉛華不御得天真。霜綃雖似當時態，爭奈嬌波不顧人。"


@pytest.mark.parametrize("reply, length, ok", [
    (FIVE, 5, True), (SEVEN, 7, True), (" " + FIVE + "\n", 5, True),
    (FIVE, 7, False),                                   # not the asked length
    (FIVE[:-1], 5, False),                              # no final 。
    (FIVE.replace("，", "。", 1), 5, False),             # wrong separator
    (FIVE + FIVE, 5, False),                            # eight clauses
    (FIVE.replace("琯", "a"), 5, False),                 # a Latin letter is not a character
    ("Here is a poem: " + FIVE, 5, False),              # nothing else may be in the reply
])
def test_well_formed_quatrains(reply, length, ok):
    assert is_quatrain(reply, length) is ok


def test_the_prompt_says_length_and_first_character():
    assert asked_form("寫一首五言絕句，以「四」字開頭。") == (5, "四")
    assert asked_form("请写一首七言绝句，第一个字是「白」。") == (7, "白")
