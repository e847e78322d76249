"""The wire protocols, one module each: :mod:`.agentrl` (AgentRL's: statuses, and every body
between client, controller and worker) and :mod:`.openai` (OpenAI's chat messages, tools and tool
calls, which AgentRL's bodies carry, and the API subset the built-in model server speaks)."""
