"""Float64 references for mnist_tp: the best each variant's model class does when trained exactly in float64 on the
same features (the fixed-point run is compared with these; neither is a path that produces a machine value).

- pool: least squares (np.linalg.lstsq) of one-hot targets on the 32 features;
- pca: one-vs-rest squared hinge (scikit-learn's LinearSVC, the loss this run uses, C=1) on the 32 features.

    >>> float64_bound("pool", Xtr, ytr, Xte, yte)      # test accuracy in [0, 1]
"""
from __future__ import annotations

import numpy as np


def float64_bound(variant: str, Xtr, ytr, Xte, yte) -> float:
    Xtr, Xte = np.asarray(Xtr, np.float64), np.asarray(Xte, np.float64)
    if variant == "pool":
        W, *_ = np.linalg.lstsq(Xtr, np.eye(10)[ytr], rcond=None)
        return float(((Xte @ W).argmax(axis=1) == yte).mean())
    from sklearn.svm import LinearSVC
    svm = LinearSVC(C=1.0, loss="squared_hinge", dual=False, fit_intercept=False, max_iter=2000).fit(Xtr, ytr)
    return float((svm.predict(Xte) == yte).mean())
