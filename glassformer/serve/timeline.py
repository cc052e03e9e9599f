"""Timeline: pictures of a server's shared KV cache, one per engine step, for reading how
continuous batching fills it (the course's chapter 9 steps an Engine by hand and draws these).

Each picture (`RowsAt`) is what rows.py's RowCache holds after a step: per row, the token whose
keys sit in each column and the request they belong to, the timeline's `length` (the column the
next decode step writes), who joined and who left during the step:

    step 4 · length 11 · D joins row 0 (6 ids reused)
    row 0  D   . . R O M E O : ␣ O ␣ . . . . .       D's prompt, prefix copied from A's row
    row 1  B   J U L I E T : ⏎ A n ␣ . . . . .
    row 2  C   . . . K I N G : ⏎ A n . . . . .

A free row still holds the ids of the request it served (kept for prefix reuse): the picture
names that request in lower case and the view fades its cells. `rows_at` only reads the engine;
`text` and `view` draw a list of pictures as plain text or as static HTML (inline styles, no
script), in English or Chinese.
"""
from __future__ import annotations

import html
from typing import NamedTuple

from glassformer.display import InlineView, boxed, resolve_lang

WAITING, RUNNING, DONE = "waiting", "running", "done"
# one hue per request, in the order the requests were made
COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
           "#9c755f")
LABEL = "text-align:left;font-weight:normal;white-space:nowrap;width:7.5em;min-width:7.5em"
SHOWN = {"\n": "⏎", " ": "␣", "\t": "⇥"}
WORDS = {
    "en": {"length": "length", "joins": "joins", "leaves": "leaves", "reused": "ids reused",
           "free": "free", "next": "the column the next step writes",
           "moved": "columns moved (realign)"},
    "zh": {"length": "length", "joins": "加入", "leaves": "离开", "reused": "个 id 复用",
           "free": "空闲", "next": "下一步写入的列",
           "moved": "列整体移动（realign）"},
}


class RowsAt(NamedTuple):
    """The shared cache after one engine step."""
    step: int
    length: int                       # the timeline's end: the next decode writes this column
    holders: tuple[str, ...]          # per row: the request whose ids it holds ("" for none)
    running: tuple[bool, ...]         # per row: is that request still being written
    cells: tuple[tuple[str, ...], ...]   # (rows, T_max) the token in each column, "" if not live
    states: dict                      # request label -> WAITING, RUNNING or DONE
    joined: tuple[tuple[str, int, int], ...]   # (label, row, ids reused) for each joiner
    left: tuple[str, ...]             # the requests that finished during the step
    moved: bool                       # the rows' columns were moved (rows.py realign)


def token_text(tokenizer, token_id: int) -> str:
    """One token as a cell shows it: a newline, space or tab made visible."""
    text = tokenizer.decode([int(token_id)])
    return "".join(SHOWN.get(ch, ch) for ch in text)


def rows_at(engine, requests: dict, step: int, before: RowsAt | None = None) -> RowsAt:
    """The picture of `engine`'s rows now. requests: label -> Sequence, every request submitted
    so far; before: the previous picture (it says which request a free row's ids came from)."""
    label_of = {id(seq): label for label, seq in requests.items()}
    rows = engine.rows
    holders, running, cells = [], [], []
    for row, seq in enumerate(engine.running):
        live = rows.live[row]                                           # (T_max,) bool
        if seq is not None:
            holder = label_of[id(seq)]
        elif live.any() and before is not None:
            holder = before.holders[row]
        else:
            holder = ""
        holders.append(holder)
        running.append(seq is not None)
        cells.append(tuple(token_text(engine.model.tokenizer, rows.ids[row, col]) if live[col]
                           else "" for col in range(rows.max_len)))
    in_rows = {id(seq) for seq in engine.running if seq is not None}
    states = {label: DONE if seq.finished else RUNNING if id(seq) in in_rows else WAITING
              for label, seq in requests.items()}
    was = before.states if before is not None else {}
    joined = tuple((label, holders.index(label) if label in holders else -1,
                    requests[label].cached_tokens)
                   for label, state in states.items()
                   if state != WAITING and was.get(label, WAITING) == WAITING)
    left = tuple(label for label, state in states.items()
                 if state == DONE and was.get(label) != DONE)
    # a decode step adds one column and a long joiner may lengthen the timeline (nothing moves);
    # any other change of length is a realign
    moved = before is not None and rows.cache.length < before.length + 1
    return RowsAt(step, rows.cache.length, tuple(holders), tuple(running), tuple(cells),
                  states, joined, left, moved)


def caption(picture: RowsAt, lang: str) -> str:
    """'step 4 · length 11 · D joins row 0 (6 ids reused) · A leaves'."""
    w = WORDS[lang]
    step = f"step {picture.step}" if lang == "en" else f"第 {picture.step} 步"
    parts = [step, f"{w['length']} {picture.length}"]
    for label, row, reused in picture.joined:
        reuse = f" ({reused} {w['reused']})" if reused else ""
        where = f" {row_label(row, lang)}" if row >= 0 else ""   # < 0: joined and finished
        parts.append(f"{label} {w['joins']}{where}{reuse}")
    parts += [f"{label} {w['leaves']}" for label in picture.left]
    if picture.moved:
        parts.append(w["moved"])
    return " · ".join(parts)


def row_label(row: int, lang: str) -> str:
    return f"row {row}" if lang == "en" else f"第 {row} 行"


def holder_name(picture: RowsAt, row: int) -> str:
    """The running request's label, a free row's last request in lower case, or '-'."""
    holder = picture.holders[row]
    if not holder:
        return "-"
    return holder if picture.running[row] else holder.lower()


def text(pictures: list[RowsAt], lang: str = "en") -> str:
    """The pictures as plain text: a caption, then one line per row, '.' for a column it does
    not own."""
    width = max((len(cell) for p in pictures for row in p.cells for cell in row), default=1)
    lines = []
    for picture in pictures:
        lines.append(caption(picture, lang))
        for row, cells in enumerate(picture.cells):
            shown = " ".join((cell or ".").ljust(width) for cell in cells)
            lines.append(f"  {row_label(row, lang)}  {holder_name(picture, row):<2} {shown}")
    return "\n".join(lines)


def colour_of(pictures: list[RowsAt]) -> dict:
    """Request label -> its colour, in the order the labels first appear."""
    labels = dict.fromkeys(label for p in pictures for label in p.states)
    return {label: COLOURS[i % len(COLOURS)] for i, label in enumerate(labels)}


def header(picture: RowsAt, lang: str) -> str:
    """The column numbers, the one the next decode step writes in bold red."""
    cells, next_column = [], WORDS[lang]["next"]
    for col in range(len(picture.cells[0])):
        if col == picture.length:
            cells.append(f'<th style="color:#c0392b" title="{next_column}">{col}</th>')
        else:
            cells.append(f'<th style="color:#8a93a6;font-weight:normal">{col}</th>')
    return f'<tr><th style="{LABEL}"></th>{"".join(cells)}</tr>'


def table(picture: RowsAt, colours: dict, lang: str) -> str:
    """One picture as an HTML table: a column per cache position, a row per cache row."""
    w = WORDS[lang]
    body = []
    for row, cells in enumerate(picture.cells):
        colour = colours.get(picture.holders[row], "#cccccc")
        # a running row's tokens white on its colour; a free row's kept ids faded
        paint = f"background:{colour};color:#fff" if picture.running[row] else \
            f"background:{colour}30;color:{colour}"
        filled = f'<td style="{paint};text-align:center;width:1.4em">{{}}</td>'
        tds = "".join(filled.format(html.escape(cell)) if cell
                      else '<td style="background:#f2f4f8;width:1.4em"></td>' for cell in cells)
        name = holder_name(picture, row) if picture.holders[row] else w["free"]
        body.append(f'<tr><th style="{LABEL}">'
                    f"{row_label(row, lang)} · <b>{html.escape(name)}</b></th>{tds}</tr>")
    return (f'<div style="margin:.6em 0 .2em">{html.escape(caption(picture, lang))}</div>'
            '<table style="border-collapse:separate;border-spacing:2px;table-layout:fixed;'
            f'font:13px ui-monospace,monospace">{header(picture, lang)}{"".join(body)}</table>')


def view(pictures: list[RowsAt], lang: str | None = None) -> InlineView:
    """The pictures as static HTML, one table per step, each request in its own colour."""
    lang = resolve_lang(lang)
    colours = colour_of(pictures)
    markup = boxed("".join(table(picture, colours, lang) for picture in pictures))
    return InlineView(markup, f"<timeline of {len(pictures)} steps>")
