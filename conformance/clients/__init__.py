"""Real clients over recorded answers: what openai-python, LangChain, LiteLLM and the Vercel AI SDK
rebuild from the exact bytes a server sent (`conformance clients RUN_DIR`).

replay_server.py serves a transcript's answer on loopback; py_openai.py, py_langchain.py, py_litellm.py
and node_ai_sdk.py drive one client each (`Job` in, `Rebuilt` out, jobs.py); compare.py judges what a
client rebuilt against the server's parsed message; record.py is the `clients.jsonl` record;
replay_run.py puts them together over a run's transcripts.
"""
