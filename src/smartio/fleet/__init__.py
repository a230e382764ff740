"""The fleet results service: many machines' StoreBench runs in one database, ranked and plotted.

`smartio serve` runs it (app.py on Starlette, served by uvicorn); `smartio results submit` and `smartio bench ...
--submit URL` send runs to it (client.py). What a submission holds and what may be compared with what is in
submission.py; what is stripped from a run before it leaves the machine, in identity.py; the one schema for SQLite and
PostgreSQL, in db.py; the queries behind the pages, in service.py.
"""
