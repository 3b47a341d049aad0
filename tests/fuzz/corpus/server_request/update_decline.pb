	
├r2.a0.c0 *
loss=
вёp=з?*
accuracyмлллллЛ?08тzJIINVALID_ARGUMENT: the task asks for 400 epochs; this site allows 20 ц╘tц╘