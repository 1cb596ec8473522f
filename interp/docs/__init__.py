"""Tools that keep the documentation true: :mod:`interp.docs.notebooks` executes the notebooks
and compares their outputs with the committed ones (``make notebooks``);
:mod:`interp.docs.reference` writes the reference pages from the code (``make docs``)."""
