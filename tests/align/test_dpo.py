"""DPO (`finetune --objective dpo`): the loss and its gradient against finite differences, the
preference formats, the first step's ln 2, TRL's metric names, resume, and bad input."""
import json
import math

import numpy as np
import pytest

from align_fixtures import FAST, LORA, pref_records, tiny_tokenizer, write_jsonl
from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.ops.dpo_loss import dpo_loss_backward, dpo_loss_forward
from glassformer.ops.token_logps import token_logps_backward, token_logps_forward
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file

FD_TOL = 1e-6     # float64 central differences, h = 1e-6 on smooth functions
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")


def test_dpo_loss_and_token_logps_match_finite_differences():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 5, 7))
    targets = rng.integers(0, 7, size=(4, 5))
    targets[:, :2] = -100
    ref = rng.standard_normal(4)

    def loss_of(values):
        logp, _ = token_logps_forward(values, targets)
        seq = logp.sum(axis=1)
        return dpo_loss_forward(seq[:2], seq[2:], ref[:2], ref[2:], beta=0.3)[0]

    logp, logp_ctx = token_logps_forward(logits, targets)
    seq = logp.sum(axis=1)
    _, ctx = dpo_loss_forward(seq[:2], seq[2:], ref[:2], ref[2:], beta=0.3)
    dchosen, drejected = dpo_loss_backward(1.0, ctx)
    dtoken = np.broadcast_to(np.concatenate([dchosen, drejected])[:, None], targets.shape)
    dlogits = token_logps_backward(dtoken, logp_ctx)
    numeric = np.zeros_like(logits)
    for index in np.ndindex(logits.shape):
        up, down = logits.copy(), logits.copy()
        up[index] += 1e-6
        down[index] -= 1e-6
        numeric[index] = (loss_of(up) - loss_of(down)) / 2e-6
    np.testing.assert_allclose(dlogits, numeric, atol=FD_TOL)
    assert np.all(dlogits[:, :2] == 0.0)   # prompt positions get nothing


def test_preference_formats_mark_only_the_completion(tmp_path):
    tokenizer = tiny_tokenizer()
    template = chat_template_of(tokenizer)
    conv = encode_pref_file(write_jsonl(tmp_path / "c.jsonl", pref_records(3)), tokenizer,
                            template, block_size=48)
    plain = encode_pref_file(write_jsonl(tmp_path / "p.jsonl", pref_records(3, False)),
                             tokenizer, template, block_size=48)
    # conversational: the completion is the reply, <|im_end|> and the template's "\n"
    row = conv.rows
    learned = row.ids[0, 1:][row.targets[0, :-1] != -100]
    assert tokenizer.decode(learned.tolist()) == "0 yes<|im_end|>\n"
    prompt = row.ids[0, :row.lengths[0]][:-len(learned)]
    assert tokenizer.decode(prompt.tolist()).endswith("<|im_start|>assistant\n")
    # plain strings: the completion and the eos TRL appends
    learned = plain.rows.ids[3, 1:][plain.rows.targets[3, :-1] != -100]   # pair 0's rejected
    assert tokenizer.decode(learned.tolist()) == " no 0<|im_end|>"
    assert conv.n == plain.n == 3


def run_dpo(tiny_base, tmp_path, out="run", records=None, extra=()):
    data = write_jsonl(tmp_path / "prefs.jsonl", records or pref_records())
    argv = ["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
            str(tmp_path / out), "--objective", "dpo", *FAST, *LORA, *extra]
    return main(argv), tmp_path / out


def test_first_step_is_ln2_and_the_log_has_trls_metrics(tiny_base, tmp_path, capsys):
    status, run = run_dpo(tiny_base, tmp_path, extra=("--sft-weight", "0"))
    assert status == 0
    steps = [r for r in read_train_log(run) if "train_loss" in r]
    assert steps[0]["train_loss"] == pytest.approx(math.log(2.0), abs=1e-6)
    assert all(name in steps[0] for name in METRICS)
    assert steps[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-7)
    assert "nll_loss" not in steps[0]
    assert json.loads((run / "finetune.json").read_text())["objective"] == "dpo"
    # and resume goes on with the same reference
    assert main(["finetune", "--out", str(run), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0


def test_full_dpo_keeps_a_copy_of_its_start_as_the_reference(tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "prefs.jsonl", pref_records())
    out = tmp_path / "full"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 "--objective", "dpo", "--full", *FAST, "--max-iters", "3",
                 "--lr-decay-iters", "3", "--sft-weight", "0"]) == 0
    steps = [r for r in read_train_log(out) if "train_loss" in r]
    assert steps[0]["train_loss"] == pytest.approx(math.log(2.0), abs=1e-6)
    assert steps[-1]["rewards/margins"] != 0.0     # the policy moved away from its copy


def test_ref_adapter_starts_at_ln2_from_a_trained_adapter(tiny_base, tmp_path, capsys):
    status, first = run_dpo(tiny_base, tmp_path, "first", extra=("--lr", "0.05"))
    assert status == 0
    args = [*FAST, "--sft-weight", "0"]
    data = tmp_path / "prefs.jsonl"
    for ref, out in (("adapter", "ref_adapter"), ("base", "ref_base")):
        assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                     str(tmp_path / out), "--objective", "dpo", "--adapter", str(first),
                     "--ref", ref, *args]) == 0
    logs = {out: [r for r in read_train_log(tmp_path / out) if "train_loss" in r][0]
            for out in ("ref_adapter", "ref_base")}
    assert logs["ref_adapter"]["train_loss"] == pytest.approx(math.log(2.0), abs=1e-6)
    assert logs["ref_base"]["rewards/margins"] != pytest.approx(0.0, abs=1e-9)


def test_from_an_adapter_the_reference_defaults_to_that_adapter(tiny_base, tmp_path, capsys):
    """As TRL given a model that already has an adapter: no --ref, the starting adapter is the
    reference (so the first step is ln 2 again), and the run saves that choice."""
    status, first = run_dpo(tiny_base, tmp_path, "first", extra=("--lr", "0.05"))
    assert status == 0
    out = tmp_path / "continued"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(tmp_path / "prefs.jsonl"),
                 "--out", str(out), "--objective", "dpo", "--adapter", str(first), *FAST,
                 "--sft-weight", "0"]) == 0
    step = [r for r in read_train_log(out) if "train_loss" in r][0]
    assert step["train_loss"] == pytest.approx(math.log(2.0), abs=1e-6)
    state = load_checkpoint(out).state["train_config"]
    assert state["objective_settings"]["ref"] == "adapter"
    # and --ref adapter without an adapter to freeze is one line
    capsys.readouterr()
    assert main(["finetune", "--model", str(tiny_base), "--data", str(tmp_path / "prefs.jsonl"),
                 "--out", str(tmp_path / "none"), "--objective", "dpo", "--ref", "adapter",
                 *FAST, *LORA]) == 2
    assert "--ref adapter freezes the adapter the run starts from" in capsys.readouterr().err


def test_the_recipes_sft_term_adds_alpha_times_the_chosen_nll(tiny_base, tmp_path, capsys):
    """TANG_DPO's --sft-weight 1 (RPO): the first step logs ln 2 + 1 * nll_loss; a weight of
    2.5 adds 2.5 times the same NLL; and the flag is refused for other objectives."""
    logs = {}
    for weight in (None, "2.5"):
        extra = () if weight is None else ("--sft-weight", weight)
        status, run = run_dpo(tiny_base, tmp_path, f"run{weight}", extra=extra)
        assert status == 0
        logs[weight] = [r for r in read_train_log(run) if "train_loss" in r][0]
    nll = logs[None]["nll_loss"]
    assert nll > 0.1 and logs["2.5"]["nll_loss"] == pytest.approx(nll, abs=1e-6)
    assert logs[None]["train_loss"] == pytest.approx(math.log(2.0) + nll, abs=1e-5)
    assert logs["2.5"]["train_loss"] == pytest.approx(math.log(2.0) + 2.5 * nll, abs=1e-5)
    data = tmp_path / "prefs.jsonl"
    capsys.readouterr()
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                 str(tmp_path / "sft"), "--sft-weight", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "--sft-weight is a dpo setting, not one of --objective sft" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(rejected=r["chosen"]), "chosen equals rejected"),
    (lambda r: r.pop("prompt"), "has no 'prompt'"),
    (lambda r: r.update(chosen=[{"role": "assistant", "content": "x" * 80}]), "ids long"),
])
def test_bad_pairs_are_one_line_and_write_nothing(tiny_base, tmp_path, capsys, change, message):
    records = pref_records()
    change(records[5])
    status, run = run_dpo(tiny_base, tmp_path, records=records)
    err = capsys.readouterr().err
    assert status == 2 and message in err and "line 6" in err and len(err.splitlines()) == 1
    assert not run.exists()


def test_eval_reports_reward_accuracy_against_the_reference(tiny_base, tmp_path, capsys):
    status, run = run_dpo(tiny_base, tmp_path, extra=("--lr", "0.05", "--max-iters", "8",
                                                      "--lr-decay-iters", "8",
                                                      "--sft-weight", "0"))
    assert status == 0
    capsys.readouterr()
    data = str(tmp_path / "prefs.jsonl")
    assert main(["eval", "--model", str(tiny_base), "--adapter", str(run), "--data", data,
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pairs"] == 24 and result["accuracy"] > 0.5 and result["margin"] > 0.0
    assert main(["eval", "--model", str(tiny_base), "--data", data]) == 2
    assert "give --adapter" in capsys.readouterr().err


@pytest.mark.parametrize("part", ["dpo", "grpo"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_explain_parts_pass_their_finite_difference_check(part, lang, capsys):
    assert main(["explain", part, "--backward", "--lang", lang]) == 0
    out = capsys.readouterr().out
    assert ("OK" in out) if lang == "en" else ("通过" in out)
    if part == "dpo":
        assert "0.6931 0.6931" in out      # step 1: the policy is the reference, ln 2
