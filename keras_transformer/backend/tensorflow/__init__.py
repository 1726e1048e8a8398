"""TensorFlow twins of the portable operations in `keras_transformer.backend`.

Each function here computes the same function as its namesake in
`keras_transformer.backend.portable`, with fused TensorFlow kernels or a
hand-written gradient. These modules are the only part of the core that
imports TensorFlow, and they are imported only when a dispatch function of
`keras_transformer.backend` picks them (TensorFlow backend, fast paths on).
"""
