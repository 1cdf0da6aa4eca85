"""``python -m app.agent``: the scanner agent without the server's command line."""

from app.agent.cli import agent

agent(prog_name="netmap-agent")
