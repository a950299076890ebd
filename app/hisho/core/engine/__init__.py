"""The engine as the rest of the app sees it: the ``Engine`` protocol (``seam``), the local child process
behind it (``client`` over ``process``), the typed requests (``ops``) and wire values (``protocol``), and the one
place a model choice becomes load parameters (``launch``). No Qt, no llama_cpp: the code that imports llama_cpp
is ``hisho.engine``, which runs in the child. Rules of use: code above the engine depends on ``seam.Engine`` and
its capabilities only; a new engine kind implements that protocol (``hisho.core.remote`` is the second)."""
