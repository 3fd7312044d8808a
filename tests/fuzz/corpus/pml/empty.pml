<schema name="empty">
    <system>
        You are a helpful AI assistant.
    </system>
</schema>

