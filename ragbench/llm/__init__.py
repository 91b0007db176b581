"""The LLM layer: chat and embeddings against OpenAI-compatible endpoints, cached by content,
with token and cost accounting (see ``ragbench.llm.client``)."""
