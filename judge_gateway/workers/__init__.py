"""Supervised worker subprocesses: one wire framing (`framing`) and one supervisor
(`supervisor`) for every process the gateway runs beside itself (the head workers and the
cosmos-rl latent decoder).

`framing` is stdlib-only and imports nothing from judge_gateway, so a worker under another
interpreter (the latent decoder's torch venv, which cannot import this package) loads it by path.
"""
