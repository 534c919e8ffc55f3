"""The importance classifier's building blocks.

`features` (hand features) and `tokenizer` (unit encoding) are torch-free and shared by training
and serving; `model` (the torch network) is imported only by training and export.
"""
