"""Page bytes in files: the data plane the SGLang backend and the Mooncake drop-in keep
object bytes with (byte_store: one directory per segment; data_plane: pages' bytes beside
their metadata in the Index). Imports the facade."""
