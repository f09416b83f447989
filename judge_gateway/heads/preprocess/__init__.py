"""A head's image preprocessing in the worker, in either `options.preprocess` mode:

`stage` (ImageStage: the prepare step of an image head, picking a mode), `device` (`device`:
batched tensor ops on the head's device), `pool` (`reference`: the library's own transform in
spawned processes over shared memory), `reference` (those transforms, built in the children by
name). This face imports none of them (only `pool` is torch-free).
"""
