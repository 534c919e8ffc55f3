"""Training, evaluating, exporting and releasing the importance classifier (needs the `train` extra).

    from winnow.training.trainer import Trainer, TrainConfig
    result = Trainer(TrainConfig()).fit("data/dataset")
    result.save("models/my-model")

`python -m winnow.training.release` rebuilds the shipped models/winnow-small end to end.
"""
