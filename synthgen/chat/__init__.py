"""The model's own format: chat-template rendering and SGLang's reasoning and tool-call parsers."""
