"""Forward/backward pairs for every Transformer op.

Each op is a pure pair `name_forward(inputs..., *, static) -> (out, ctx)` and
`name_backward(dout, ctx) -> grads in the forward's input order` (STYLE.md §3).

Shape legend, used in comments and error messages everywhere:
    B batch, T query length, S key/source length, C width (d_model), H heads, K KV heads,
    D head dim, F MLP hidden, V vocab, L layers.
"""
