"""Benchmark evaluation by hand: few-shot log-likelihood scoring of in-context-learning tasks and
the CORE score (DCLM's mean centred accuracy, which nanochat reports).

    tasks_table.py  TaskSpec, CORE_TASKS     each task's file, type, shots, baseline, delimiter
    items.py        read_items(path, kind)   a task file as Items, bad lines named
    prompts.py      requests(spec, items, i) few-shot prompts, seeded, never the item itself
    encode.py       encode_pair(tok, c, x)   tokens as lm-eval's hf backend makes them
    score.py        score_batch(model, g)    several items a forward, each prefix once,
                                             options from the KV cache (score_requests: one)
    batches.py      plan_batches(groups)     which items share a forward
    metrics.py      pick, stderr, centred    acc, acc_norm and CORE's arithmetic
    run_task.py     evaluate_task(model, spec, data_dir, limit=N)   one task's TaskResult
    results.py      results_record, compare  the results JSON and two runs compared
    gsm8k.py        read_problems, messages, final_number   GSM8K in the chat format
    generative.py   evaluate_generative(model, spec, dir)   greedy replies from a cached prefix

The data is not shipped: `glassformer eval --core --data-dir DIR` (docs/evaluate.md).
"""
