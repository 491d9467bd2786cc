"""The reward server (``prmkit serve``) and its client.

* :mod:`prmkit.serve.app`: the FastAPI app (``/v1/score``, ``/get_reward``, ``/health``);
* :mod:`prmkit.serve.batcher`: dynamic micro-batching on one worker thread;
* :mod:`prmkit.serve.queries`: OpenRLHF queries -> (problem, steps), step scores -> rewards;
* :mod:`prmkit.serve.config`: listening address, token, limits;
* :mod:`prmkit.serve.client`: a Python client with retries;
* :mod:`prmkit.serve.cli`: the ``prmkit serve`` command.

FastAPI and uvicorn are the ``serve`` extra; only ``app`` imports them.
"""
