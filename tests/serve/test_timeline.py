"""serve/timeline.py: the pictures of an engine stepped by hand name who joins (and the ids it
reuses), who leaves, which row holds whose ids and when the columns move; text and HTML draw
them in both languages (the course's chapter 9 shows them)."""
from serve_models import tiny_chat_model

from glassformer.generate.sampling import Sampling
from glassformer.serve import timeline
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Sequence, Settings

# step -> (label, prompt, max_tokens): A and B together, C joins while they run, D reuses A's
ARRIVALS = {1: [("A", "hello", 3), ("B", "cats<", 9)], 2: [("C", "zz", 12)],
            4: [("D", "hello w", 4)]}


def stepped(max_len=16):
    model = tiny_chat_model(max_seq_len=64)
    engine = Engine(model, max_batch=3, max_queue=8, max_len=max_len)
    requests, pictures = {}, []
    for step in range(1, 40):
        for label, prompt, max_tokens in ARRIVALS.get(step, []):
            requests[label] = Sequence(0, model.tokenizer.encode(prompt),
                                       Settings(max_tokens, Sampling(temperature=0.0)),
                                       frozenset(), model.tokenizer, lambda event: None)
            engine.submit([requests[label]])
        engine.step()
        pictures.append(timeline.rows_at(engine, requests, step,
                                         pictures[-1] if pictures else None))
        if not engine.busy() and not engine.waiting:
            break
    return model, requests, pictures


def test_joins_leaves_reuse_and_moves():
    _, requests, pictures = stepped()
    by_step = {p.step: p for p in pictures}
    assert by_step[1].joined == (("A", 0, 0), ("B", 1, 0)) and by_step[1].length == 6
    assert by_step[2].joined == (("C", 2, 0),) and by_step[2].left == ("A",)
    assert by_step[2].holders[0] == "A" and not by_step[2].running[0]   # A's ids stay
    assert by_step[4].joined == (("D", 0, 5),) and requests["D"].cached_tokens == 5
    assert [p.left for p in pictures if p.left] == [("A",), ("D",), ("B",), ("C",)]
    moved = [p for p in pictures if p.moved]
    assert len(moved) == 1 and moved[0].length < by_step[moved[0].step - 1].length
    assert moved[0].holders[:2] == ("", "")                  # free rows forgotten by the move
    assert all(state == timeline.DONE for state in pictures[-1].states.values())


def test_cells_are_the_rows_tokens_ending_at_length():
    _, _, pictures = stepped()
    first = pictures[0]
    assert "".join(first.cells[0]) == "hello" + first.cells[0][first.length - 1]
    assert first.cells[0][first.length - 1] != "" and first.cells[0][first.length] == ""
    assert "".join(first.cells[1]).startswith("cats<")
    assert first.cells[2] == ("",) * 16


def test_text_and_view_in_both_languages():
    _, _, pictures = stepped()
    text = timeline.text(pictures)
    assert text.splitlines()[0] == "step 1 · length 6 · A joins row 0 · B joins row 1"
    assert "D joins row 0 (5 ids reused)" in text and "columns moved (realign)" in text
    assert "  row 0  a  " in text                            # A's kept ids, A gone
    zh = timeline.text(pictures[:1], lang="zh")
    assert zh.startswith("第 1 步 · length 6 · A 加入 第 0 行") and "  第 2 行  -  " in zh
    view = timeline.view(pictures, lang="en")
    markup = view._repr_html_()
    assert 'class="glassformer-view"' in markup and "<script" not in markup
    assert markup.count("<table") == len(pictures) and "&lt;" in markup   # '<' escaped
    assert repr(view) == f"<timeline of {len(pictures)} steps>"
    assert "空闲" in timeline.view(pictures[:1], lang="zh")._repr_html_()
