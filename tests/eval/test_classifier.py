"""The evaluation classifier (eval/classifier.py): trained on mnist5k, its held-out accuracy."""

from __future__ import annotations


def test_classifier_reports_held_out_accuracy(mnist_classifier):
    _, info = mnist_classifier
    assert info["test_set"] == "held-out 500 of the train split"
    assert info["test_accuracy"] > 0.8  # two epochs on 4,500 digits; chance is 0.1
