"""The Keys & tenancy screen, its dialogs, and the Usage screen of what the keys were served."""
